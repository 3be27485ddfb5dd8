"""Records a returned call wrote before a failed WAL fsync are written again until durable.

They were never fsynced in the failed file, which is not synced again: the writer's
next call writes them again, with their seqs, into a new file. A full disk during that
rewrite fails the call and keeps them in memory; the first call after space returns
writes them, and a transaction begun before the failure then commits whole.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import FLUSHED_BY_CALLER, id_batch, reopened_ids

WAL = f"{os.sep}wal{os.sep}"


def test_a_rewrite_that_meets_a_full_disk_heals_once_space_returns(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    store.append(id_batch(0))
    txn = store.begin_txn("app", 1)
    store.append(id_batch(10), txn_id=txn)
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.flush()
    failed_at = next(t for t in io.trace if t.failed)
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains=WAL)
    for _ in range(2):
        with pytest.raises(WalFailedError):
            store.flush()
    assert full.fired >= 2
    io.faults.remove(full)
    store.flush()
    assert [t[0] for t in store.writer.pending_txns()] == [txn]
    assert store.commit_txn("app", 1, [("p-0", txn)])
    store.close()
    # the failed file is never synced again: its name is unlinked before it is reused
    # (read-only probes of it, stat and listdir, change nothing and are passed over)
    after = [
        t.op
        for t in io.trace[failed_at.index + 1 :]
        if t.path == failed_at.path and t.op not in ("stat", "listdir", "read")
    ]
    assert after[0] == "unlink", after
    assert reopened_ids(root, FLUSHED_BY_CALLER) == [0, 1, 2, 10, 11, 12]
