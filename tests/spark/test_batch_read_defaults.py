"""A plain ``spark.read.format("quiver")`` works whatever the pushdown setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality

from tests.stores import int_segments


def _store(root: Path) -> None:
    int_segments(root, [(0, 50), (50, 50)], column="id")


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_batch_read_works_whatever_the_python_filter_pushdown_setting(
    spark, tmp_path: Path, pushdown: str
) -> None:
    _store(tmp_path / "s")
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, pushdown)
    try:
        got = spark.read.format("quiver").load(str(tmp_path / "s")).where("id >= 10")
        want = spark.range(10, 100).select("id")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    finally:
        spark.conf.set(key, before)
