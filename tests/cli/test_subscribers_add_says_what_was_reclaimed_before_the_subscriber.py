"""``quiver subscribers PATH add NAME`` on a store whose retention already reclaimed
segments prints one WARNING line saying how many were reclaimed before NAME existed,
their rows and the range of their ingestion times, and where it starts
(``reclaimed_before`` with ``--json``); before any reclaim it prints nothing of the
kind. The real console script on a POSIX root; in-process on a
``memory://`` root (the in-process object store lives only in this process)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.segment import SegmentMeta
from quiver_spark.subscribers import Outcome
from quiver_spark.subscribers.reclaimed import utc
from tests.stores import int_segments, wal_in

from .conftest import BIN, CFG, run, write_segments

QUIVER = BIN / "quiver"


def line(gone: Sequence[SegmentMeta], name: str = "auditor", starts: int = 3) -> str:
    """The WARNING naming ``gone`` (p-0 seqs 1 and 2) reclaimed before ``name``."""
    rows = sum(m.rows for m in gone)
    lo, hi = gone[0].min_ingestion_ns, gone[-1].max_ingestion_ns
    return (
        f"WARNING: 2 segments ({rows} rows ingested {utc(lo)} to {utc(hi)}; p-0: 2 up to "
        f"seq 2, {rows} rows) were reclaimed before subscriber {name} was registered; it "
        f"starts at p-0 seq {starts}"
    )


def reclaimed_two_of_three(root: str) -> None:
    """p-0 holds 3 segments; ``exporter`` acknowledged the first 2, which retention
    reclaimed."""
    with QuiverStore.open(root, CFG, partition=None, background=False) as store:
        store.subscribers.register("exporter")
        store.subscribers.record("exporter", "p-0", [1, 2], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 2]}


def quiver(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QUIVER, *map(str, args)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_the_console_script_says_how_many_segments_were_reclaimed_before_the_new_subscriber(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    metas = write_segments(root, "p-0", 3)
    reclaimed_two_of_three(str(root))
    out = quiver("subscribers", root, "add", "auditor")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "added subscriber auditor (start earliest: p-0 after 2)",
        line(metas[:2]),
    ]
    doc = json.loads(quiver("subscribers", root, "add", "later", "--json").stdout)
    lo, hi = metas[0].min_ingestion_ns, metas[1].max_ingestion_ns
    recorded = {"segments": 2, "rows": 200, "min_ingestion_ns": lo, "max_ingestion_ns": hi}
    assert doc["reclaimed_before"] == {
        "segments": 2, "at_least": False, "rows": 200,
        "min_ingestion_ns": lo, "max_ingestion_ns": hi,
        "partitions": {"p-0": {"segments": 2, "highest_seq": 2, "starts_at": 3,
                               "recorded": recorded}},
    }  # fmt: skip


def test_the_console_script_adding_a_subscriber_before_any_reclaim_prints_no_warning(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 3)
    out = quiver("subscribers", root, "add", "auditor")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["added subscriber auditor (start earliest: p-0 after 0)"]
    assert "reclaimed" not in out.stderr
    doc = json.loads(quiver("subscribers", root, "add", "later", "--json").stdout)
    assert doc["reclaimed_before"] is None


def test_add_on_a_memory_root_says_how_many_segments_were_reclaimed_before_it(
    tmp_path: Path, bucket: str
) -> None:
    url = f"memory://{bucket}/s"
    cfg = wal_in(tmp_path / "wal")
    metas = int_segments(url, [(0, 10)] * 3, config=cfg)
    with QuiverStore.open(url, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        store.subscribers.record("exporter", "p-0", [1, 2], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 2]}
    res = run(["subscribers", url, "add", "auditor"])
    assert res.exit_code == 0, res.output + res.stderr
    assert res.stdout.splitlines()[-1] == line(metas[:2])
    res = run(["subscribers", url, "add", "newest", "--start", "latest"])
    # latest: after the one segment retained
    assert res.stdout.splitlines()[-1] == line(metas[:2], "newest", starts=4)
