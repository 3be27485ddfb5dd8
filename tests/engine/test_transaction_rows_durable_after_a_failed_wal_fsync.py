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

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.faults import CrashSimulator, FaultyIO
from tests.stores import FLUSHED_BY_CALLER, id_batch, reopened_ids


def test_a_transaction_committed_after_a_flush_that_succeeded_survives_power_loss(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, FLUSHED_BY_CALLER, background=False) as store:
        store.append(id_batch(0))
        store.flush()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    txn = store.begin_txn("app", 1)
    store.append(id_batch(10), txn_id=txn)
    io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    with pytest.raises(WalFailedError):
        store.flush()
    store.flush()  # succeeds: everything appended before it is durable
    assert [t[0] for t in store.writer.pending_txns()] == [txn]
    assert store.commit_txn("app", 1, [("p-0", txn)])
    target = sim.power_loss_at_end(io.trace).materialize(tmp_path / "after-power-loss")
    assert reopened_ids(target, FLUSHED_BY_CALLER) == [0, 1, 2, 10, 11, 12]
