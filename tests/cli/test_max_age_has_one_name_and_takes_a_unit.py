"""`retention.max_age` is set under that one name, with a unit.

`quiver config PATH set retention.max_age=2d` records the policy; a bare number is
refused (hours or seconds?), and the option's former spelling
`retention.max_retain_after_ingestion_hours` is an unknown policy option whose error
names `retention.max_age`: nothing is recorded either way.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import run, run_json, write_segments


def test_max_age_with_a_unit_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    run_json(["config", root, "set", "retention.max_age=48h"])
    assert run_json(["config", root])["policy"]["retention.max_age"] == "2d"


def test_a_bare_max_age_is_refused_naming_the_option(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    res = run(["config", root, "set", "retention.max_age=48"])
    assert res.exit_code == 2
    assert "retention.max_age" in res.stderr and "a bare number is ambiguous" in res.stderr
    assert run_json(["config", root])["policy"]["retention.max_age"] == "none"


def test_the_former_spelling_is_an_unknown_option_naming_max_age(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    res = run(["config", root, "set", "retention.max_retain_after_ingestion_hours=48"])
    assert res.exit_code == 2
    first = res.stderr.splitlines()[0]
    assert first.startswith(
        "Error: unknown policy option 'retention.max_retain_after_ingestion_hours' "
        "(did you mean 'retention.max_age'?)"
    ), first
    assert run_json(["config", root])["policy"]["retention.max_age"] == "none"
