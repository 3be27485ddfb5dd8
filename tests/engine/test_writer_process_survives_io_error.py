"""A writer process that meets an I/O error goes on, and a new process reads every row.

Real processes: a writer process has one I/O fail (through a fault-injecting file
layer), catches nothing but what it is told, keeps appending and committing, and
either closes or dies (``os._exit``); a new process then reopens the store and reads
every committed row exactly once. ``quiver fsck`` and ``quiver gc`` run on what the
dead process left: neither calls a segment that STATE commits an orphan, and both
leave the partition readable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.child import ids_read_by_a_new_process, run_python

PRELUDE = """
import errno, os, time
import pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import FaultyIO

def batch(lo, n):
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})
"""


def _quiver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_600_committed_rows_survive_one_enospc_in_a_background_tick(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    run_python(
        PRELUDE
        + """
cfg = StoreConfig(
    wal=WalConfig(flush_interval_s=0.01),
    segment=SegmentConfig(max_open_duration_s=0.2, target_size_bytes=1599),
)
io = FaultyIO()
store = QuiverStore.open(root, cfg, io=io)
txn = store.begin_txn("app", 1)
for lo in range(0, 600, 100):
    store.append(batch(lo, 100), txn_id=txn)
store.flush()
fault = io.fail("open", 2, errno.ENOSPC, path_contains=".arrow")
store.commit_txn("app", 1, [("p-0", txn)])
while not fault.fired:  # the background tick admitting the transaction meets it
    time.sleep(0.01)
txn = store.begin_txn("app", 2)
store.append(batch(600, 100), txn_id=txn)
store.append(batch(700, 50))
store.flush()
store.commit_txn("app", 2, [("p-0", txn)])
store.close()
""",
        root=root,
    )
    assert ids_read_by_a_new_process(root) == list(range(750))


def test_a_process_that_dies_after_retrying_a_failed_state_write_loses_no_row(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    run_python(
        PRELUDE
        + """
cfg = StoreConfig(wal=WalConfig(flush_interval_s=0), segment=SegmentConfig(max_open_duration_s=3600))
io = FaultyIO()
store = QuiverStore.open(root, cfg, io=io, background=False)
store.append(batch(1, 3))
store.flush()
io.fail("fsync_dir", 1, errno.EIO, path_contains=os.path.join("partitions", "p-0"))
try:
    store.finalize()
except OSError:
    pass
store.append(batch(4, 3))
store.flush()
io.fail("open", 1, errno.ENOSPC, path_contains="STATE")
try:
    store.finalize()
except OSError:
    pass
os._exit(0)
""",
        root=root,
    )
    fsck = _quiver("fsck", root, "--json")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    report = json.loads(fsck.stdout)
    orphans = [w for w in report["warnings"] if w["kind"] == "segment_orphan"]
    assert all(w["seq"] != 1 for w in orphans), orphans
    gc = _quiver("gc", root)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert ids_read_by_a_new_process(root) == [1, 2, 3, 4, 5, 6]


def test_fsck_calls_a_segment_committed_by_a_dead_process_pending_not_orphan(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    run_python(
        PRELUDE
        + """
cfg = StoreConfig(wal=WalConfig(flush_interval_s=0), segment=SegmentConfig(max_open_duration_s=3600))
io = FaultyIO()
store = QuiverStore.open(root, cfg, io=io, background=False)
store.append(batch(1, 3))
store.flush()
io.fail("open", 1, errno.EIO, path_contains=".meta")
try:
    store.finalize()
except OSError:
    pass
os._exit(0)
""",
        root=root,
    )
    fsck = _quiver("fsck", root, "--json")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    kinds = {(w["kind"], w["seq"]) for w in json.loads(fsck.stdout)["warnings"]}
    assert ("segment_pending", 1) in kinds and ("segment_orphan", 1) not in kinds, kinds
    assert ids_read_by_a_new_process(root) == [1, 2, 3]
