"""``quiver subscribers PATH add NAME`` on a store whose retention already reclaimed
segments prints one WARNING line saying how many were reclaimed before NAME existed
and where it starts (``reclaimed_before`` with ``--json``); before any reclaim it
prints nothing of the kind. The real console script on a POSIX root; in-process on a
``memory://`` root (the in-process object store lives only in this process)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.subscribers import Outcome
from tests.stores import int_segments, wal_in

from .conftest import BIN, CFG, run, write_segments

QUIVER = BIN / "quiver"
LINE = (
    "WARNING: 2 segments (p-0: 2 up to seq 2; rows and time range not recorded) were "
    "reclaimed before subscriber auditor was registered; it starts at p-0 seq 3"
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
    write_segments(root, "p-0", 3)
    reclaimed_two_of_three(str(root))
    out = quiver("subscribers", root, "add", "auditor")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "added subscriber auditor (start earliest: p-0 after 2)",
        LINE,
    ]
    doc = json.loads(quiver("subscribers", root, "add", "later", "--json").stdout)
    assert doc["reclaimed_before"] == {
        "segments": 2, "at_least": False, "rows": None,
        "partitions": {"p-0": {"segments": 2, "highest_seq": 2, "starts_at": 3}},
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
    int_segments(url, [(0, 10)] * 3, config=cfg)
    with QuiverStore.open(url, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        store.subscribers.record("exporter", "p-0", [1, 2], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 2]}
    res = run(["subscribers", url, "add", "auditor"])
    assert res.exit_code == 0, res.output + res.stderr
    assert res.stdout.splitlines()[-1] == LINE
    res = run(["subscribers", url, "add", "newest", "--start", "latest"])
    assert res.stdout.splitlines()[-1] == LINE.replace("auditor", "newest").replace(
        "p-0 seq 3", "p-0 seq 4"
    )  # latest: after the one segment retained
