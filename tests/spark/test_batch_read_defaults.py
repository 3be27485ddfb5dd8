"""A plain ``spark.read.format("quiver")`` works whatever the pushdown setting."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from chispa import assert_df_equality

from quiver_spark import QuiverStore


def _store(root: Path) -> None:
    with QuiverStore.open(str(root), background=False) as store:
        for lo in (0, 50):
            store.append(pa.record_batch({"id": pa.array(range(lo, lo + 50), type=pa.int64())}))
            store.finalize()


def test_batch_read_works_with_python_filter_pushdown_disabled(spark, tmp_path: Path) -> None:
    _store(tmp_path / "s")
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        got = spark.read.format("quiver").load(str(tmp_path / "s")).where("id >= 10")
        want = spark.range(10, 100).select("id")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    finally:
        spark.conf.set(key, before)


def test_batch_read_works_with_python_filter_pushdown_enabled(spark, tmp_path: Path) -> None:
    _store(tmp_path / "s")
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "true")
    try:
        got = spark.read.format("quiver").load(str(tmp_path / "s")).where("id < 60")
        want = spark.range(0, 60).select("id")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    finally:
        spark.conf.set(key, before)
