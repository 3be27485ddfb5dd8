"""After a failed WAL fsync, a flush that succeeds covers undecided transactions too.

A failed fsync leaves the WAL file's unsynced bytes of unknown fate (the kernel may
drop them; power loss does). The writer's next call recovers through new files and
seals the plain rows it replayed; a transaction still undecided cannot be sealed, so
its records must not stay only in the failed file: once a later ``flush`` returns,
every record appended before it is durable, and a transaction committed after that
flush is readable whole after a power loss.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import CrashSimulator, FaultyIO

FLUSHED_BY_CALLER = StoreConfig(
    wal=WalConfig(flush_interval_s=3600), segment=SegmentConfig(max_open_duration_s=3600)
)


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def test_a_transaction_committed_after_a_flush_that_succeeded_survives_power_loss(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, FLUSHED_BY_CALLER, background=False) as store:
        store.append(_batch(0))
        store.flush()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    txn = store.begin_txn("app", 1)
    store.append(_batch(10), txn_id=txn)
    io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    with pytest.raises(WalFailedError):
        store.flush()
    store.flush()  # succeeds: everything appended before it is durable
    assert [t[0] for t in store.writer.pending_txns()] == [txn]
    assert store.commit_txn("app", 1, [("p-0", txn)])
    states = sim.states(io.trace, points=[len(io.trace)])
    # a state equal to an earlier one is listed once, under the first kind: when every
    # byte is durable the power-loss state is the process state
    power = next((s for s in states if s.kind == "power"), states[0])
    target = power.materialize(tmp_path / "after-power-loss")
    with QuiverStore.open(target, FLUSHED_BY_CALLER, background=False) as again:
        again.finalize()
        ids = sorted(i for b in again.scan() for i in b.column("id").to_pylist())
    assert ids == [0, 1, 2, 10, 11, 12]
