"""A command given another segment location than the store recorded is refused in one
line naming the flag the user typed (``--segments-path``) and both locations."""

from __future__ import annotations

from pathlib import Path

from .conftest import Built, run


def test_another_segments_path_is_refused_naming_the_flag_and_both_locations(
    built: Built, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    res = run(["status", built.root, "--segments-path", elsewhere])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    recorded = Path(built.root) / "segments"
    assert line == (
        f"Error: --segments-path {elsewhere} contradicts the segment location recorded in "
        f"{Path(built.root) / 'STORE'} at creation, {str(recorded)!r} (omit the option to use it)"
    ), line
    assert "segments.path" not in line
