"""The CLI uses the README's words: ``txns`` takes a QUERY_ID, and a caught-up
subscriber's LAG TIME reads ``-`` in ``subscribers list`` as in ``status``."""

from __future__ import annotations

from pathlib import Path

from .conftest import Built, run

REPO = Path(__file__).resolve().parents[2]


def test_txns_help_names_the_query_id_the_readme_names() -> None:
    res = run(["txns", "--help"])
    assert res.exit_code == 0
    assert "quiver txns PATH discard QUERY_ID --yes" in res.output
    assert "APP" not in res.output
    assert "quiver txns PATH discard QUERY_ID --yes" in (REPO / "README.md").read_text()


def _lag_time(table: str, subscriber: str, column: int) -> list[str]:
    rows = [line.split() for line in table.splitlines() if line.split()[:1] == [subscriber]]
    return [r[column] for r in rows]


def test_a_caught_up_subscriber_shows_no_lag_time_in_list_as_in_status(built: Built) -> None:
    listed = run(["subscribers", built.root, "list"])
    status = run(["status", built.root, "--subscriber", "fast"])
    assert listed.exit_code == 0 and status.exit_code == 0
    assert _lag_time(listed.stdout, "fast", -3) == ["-"], listed.stdout
    assert set(_lag_time(status.stdout, "fast", -1)) == {"-"}, status.stdout
