"""A commit decision reported to the committer survives a power loss.

``commit_txn`` writes the record to a temporary file, links it to its final name and
fsyncs the directory. When that directory fsync fails the call raises, and the
committer (a rerun Spark batch, a retry loop, a new process) commits again: the name
is in the page cache, so the second call finds it and answers "already decided".
From then on the committer counts the transaction as committed (Spark records the
batch done and never reruns it), so the name must be durable by the time any call
reports the decision: after a power loss the transaction's rows are readable.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import CrashSimulator, FaultyIO

FLUSHED_BY_CALLER = StoreConfig(
    wal=WalConfig(flush_interval_s=3600), segment=SegmentConfig(max_open_duration_s=3600)
)


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


@pytest.mark.parametrize("failed_op", ["fsync_dir", "unlink"])
def test_a_commit_retried_after_a_failed_directory_fsync_survives_power_loss(
    tmp_path: Path, failed_op: str
) -> None:
    """``unlink``: removing the temporary name failed, before the directory fsync."""
    root = str(tmp_path / "s")
    QuiverStore.open(root, FLUSHED_BY_CALLER, background=False).close()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    txn = store.begin_txn("app", 7)
    store.append(_batch(100), txn_id=txn)
    store.flush()
    io.fail(failed_op, 1, errno.EIO, path_contains=f"{os.sep}commits{os.sep}app")
    with pytest.raises(OSError):
        store.commit_txn("app", 7, [("p-0", txn)])
    store.commit_txn("app", 7, [("p-0", txn)])  # "already decided": the batch is done
    states = sim.states(io.trace, points=[len(io.trace)])
    # a state equal to an earlier one is listed once, under the first kind: when every
    # byte is durable the power-loss state is the process state
    power = next((s for s in states if s.kind == "power"), states[0])
    store.close()
    target = power.materialize(tmp_path / "after-power-loss")
    with QuiverStore.open(target, FLUSHED_BY_CALLER, background=False) as again:
        again.writer.maintain()
        again.finalize()
        ids = sorted(i for b in again.scan() for i in b.column("id").to_pylist())
    assert ids == [100, 101, 102]
