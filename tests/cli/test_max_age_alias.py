"""`retention.max_age` and its earlier spelling mean the same value.

`quiver config PATH set retention.max_retain_after_ingestion_hours=48` and
`... retention.max_age=48` record the same policy (or the unitless value is refused
under the new name): moving from the old name to the new one never turns hours into
seconds.
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
