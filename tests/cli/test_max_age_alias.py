"""`retention.max_age` and its documented earlier spelling disagree on the same value.

README, Options: `retention.max_age` is listed "(also accepted:
`retention.max_retain_after_ingestion_hours`)", one option under two names. Yet
`quiver config PATH set retention.max_retain_after_ingestion_hours=48` records 48
hours while `quiver config PATH set retention.max_age=48` records 48 *seconds*: a
user who moves from the old name to the new one, as the README asks, keeps the value
and silently makes the store delete unacknowledged segments after 48 s. The same
value must give the same policy under both names, or the unitless value must be
refused under the new name.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import run, run_json, write_segments


def test_bare_max_age_means_the_same_under_both_names(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    old = run_json(["config", root, "set", "retention.max_retain_after_ingestion_hours=48"])
    assert old["policy"]["retention.max_age"] == "2d"
    res = run(["config", root, "set", "retention.max_age=48", "--json"])
    if res.exit_code != 0:  # refusing a duration without a unit is fine
        assert "retention.max_age" in res.output
        return
    assert run_json(["config", root])["policy"]["retention.max_age"] == "2d"
