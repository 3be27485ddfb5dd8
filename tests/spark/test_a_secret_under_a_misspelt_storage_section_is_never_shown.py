"""A secret under a misspelt ``storage`` prefix (``storag:`` in a store profile, option
``storge.aws_secret_access_key``) is an unknown option the reader and the writer refuse
in one line naming the key, never its value: the profile promises no value of its is
ever shown, and whatever sits beside a credential's name is taken for one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

SECRET = "misspelt-section-secret-5e1d"


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


@pytest.mark.parametrize(
    "given",
    [
        pytest.param({"profile": {"storag": {"aws_secret_access_key": SECRET}}}, id="profile"),
        pytest.param({"option": {"storge.aws_secret_access_key": SECRET}}, id="option"),
    ],
)
def test_reader_and_writer_name_the_misspelt_key_and_never_its_value(
    spark: Any, tmp_path: Path, given: dict[str, dict[str, Any]]
) -> None:
    options: dict[str, str] = dict(given.get("option", {}))
    if "profile" in given:
        profile = tmp_path / "profile.yaml"
        profile.write_text(yaml.safe_dump(given["profile"]))
        options["config"] = str(profile)
    root = str(tmp_path / "store")

    with pytest.raises(Exception) as read:
        spark.read.format("quiver").options(**options).load(root).collect()
    with pytest.raises(Exception) as wrote:
        spark.createDataFrame([(1,)], "k long").write.format("quiver").mode("append").options(
            **options
        ).save(root)

    for err in (read.value, wrote.value):
        assert "aws_secret_access_key" in str(err), first_line(err)
        assert "unknown option" in str(err), first_line(err)
        assert SECRET not in str(err), first_line(err)


def test_the_folded_options_show_their_names_never_their_values() -> None:
    """A query's folded options (kept on its readers and writers) print their names only."""
    from quiver_spark.spark.options import spark_options

    folded = spark_options({"path": "/tmp/q", "storage.aws_secret_access_key": "sekrit-folded-1"})
    assert "sekrit-folded-1" not in repr(folded) and "sekrit-folded-1" not in str(folded)
    assert "storage.aws_secret_access_key" in repr(folded)
