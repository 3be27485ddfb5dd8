"""Each subscriber's progress is visible outside ``--json`` too: ``quiver metrics``
exports its head lag and backlog (segments, rows, age; the backlog's bytes) as gauges (the figures ``quiver status --json``
shows, from the same computation over the same marks), ``quiver status`` prints them, and both name the
segments and rows its consumers dropped past their acceptance horizon."""

from __future__ import annotations

import re

from quiver_spark import QuiverStore
from quiver_spark.subscribers import records

from .conftest import Built, run, run_json


def gauge(text: str, family: str, subscriber: str) -> float:
    m = re.search(rf'^{family}\{{[^}}]*subscriber="{subscriber}"[^}}]*\}} (\S+)$', text, re.M)
    assert m, f"{family} for {subscriber} missing from:\n{text}"
    return float(m.group(1))


def test_the_gauges_are_the_head_lag_and_backlog_status_shows(built: Built) -> None:
    doc = run_json(["status", built.root])
    res = run(["metrics", built.root])
    assert res.exit_code == 0, res.output
    for sub in doc["subscribers"]:
        name = sub["name"]
        for family, key in (
            ("quiver_subscriber_head_lag_segments", "head_lag_segments"),
            ("quiver_subscriber_backlog_segments", "backlog_segments"),
            ("quiver_subscriber_head_lag_rows", "head_lag_rows"),
            ("quiver_subscriber_backlog_rows", "backlog_rows"),
            ("quiver_subscriber_lag_segments", "lag_segments"),
        ):
            assert gauge(res.stdout, family, name) == sub[key], (family, name)
        # bytes: the gauge counts the segments' data as the retention index holds it,
        # status each segment's files on disk (.arrow plus .meta)
        backlog_bytes = gauge(res.stdout, "quiver_subscriber_backlog_bytes", name)
        assert (
            0 < backlog_bytes < sub["backlog_bytes"] or backlog_bytes == sub["backlog_bytes"] == 0
        )
        assert gauge(res.stdout, "quiver_subscriber_backlog_seconds", name) >= 0
        assert gauge(res.stdout, "quiver_subscriber_head_lag_seconds", name) >= 0
    slow = next(s for s in doc["subscribers"] if s["name"] == "slow")
    # p-0: seq 2 unread below the acknowledged 3; p-1: nothing acknowledged
    assert (slow["backlog_segments"], slow["head_lag_segments"]) == (1, 3)
    assert slow["head_lag_seconds"] > 0 and slow["backlog_seconds"] > 0
    # rows: what the segments' metadata records, p-0 seq 2 behind, p-1 every segment ahead
    rows = {(p, m.seq): m.rows for p, ms in built.metas.items() for m in ms}
    want_head = sum(r for (p, _), r in rows.items() if p == "p-1")
    assert (slow["backlog_rows"], slow["head_lag_rows"]) == (rows[("p-0", 2)], want_head)
    assert slow["backlog_rows"] > 0
    by_part = {r["partition"]: r for r in slow["partitions"]}
    assert (by_part["p-0"]["backlog_rows"], by_part["p-0"]["head_lag_rows"]) == (
        rows[("p-0", 2)],
        0,
    )
    assert (by_part["p-1"]["backlog_rows"], by_part["p-1"]["head_lag_rows"]) == (0, want_head)


def test_status_text_prints_head_lag_backlog_and_horizon_drops(built: Built) -> None:
    with QuiverStore.open(str(built.root), partition=None) as store:
        records.note_horizon_drops(store.objects, "slow", 2, 200)
    res = run(["status", built.root])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  slow: "))
    head_rows = sum(m.rows for m in built.metas["p-1"])
    backlog_rows = next(m.rows for m in built.metas["p-0"] if m.seq == 2)
    assert re.fullmatch(
        rf"    head lag 3 segments, {head_rows} rows \(\S+\), "
        rf"backlog 1 segments, {backlog_rows} rows, \S+ \(oldest \S+\)",
        lines[at + 1],
    ), lines[at + 1]
    assert lines[at + 2] == "    dropped past its acceptance horizon: 2 segments, 200 rows"
    fast = next(i for i, line in enumerate(lines) if line.startswith("  fast: "))
    assert not lines[fast + 1].startswith("    ")  # nothing behind, nothing dropped
    doc = run_json(["status", built.root])
    subs = {s["name"]: s for s in doc["subscribers"]}
    assert (subs["slow"]["horizon_dropped_segments"], subs["slow"]["horizon_dropped_rows"]) == (
        2,
        200,
    )
    assert subs["fast"]["horizon_dropped_segments"] == 0
