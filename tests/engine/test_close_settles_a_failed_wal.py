"""Closing a writer whose WAL failed settles the failed file before the lock is released.

A close is not a crash. After a failed WAL write or fsync the close cuts the failed file
in STATE at the last acknowledged record and writes again, durably, what calls that
returned wrote (ARCHITECTURE.md §9.4), so a close that returns leaves every such row
durable and none of a call that raised. When the disk does not let it (still full),
the close still releases the partition and says, in one line, that the next open may
read back or lose unacknowledged records, as after a crash.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import FLUSHED_BY_CALLER, id_batch, reopened_ids, traced_new_store

WAL = f"{os.sep}wal{os.sep}"


def test_rows_of_a_call_that_returned_survive_a_power_loss_after_the_close_that_follows_a_failed_flush(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    store.append(id_batch(0))
    store.flush()
    store.append(id_batch(10))  # returned; not flushed yet
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.flush()
    store.close()  # returns: the rows of the append that returned are durable
    power = [s for s in sim.states(io.trace, points=[len(io.trace)]) if s.kind == "power"]
    assert len(power) == 1
    target = power[0].materialize(tmp_path / "after-power-loss")
    assert reopened_ids(target, FLUSHED_BY_CALLER) == [0, 1, 2, 10, 11, 12]


def test_a_close_that_cannot_cut_the_failed_wal_says_so_and_releases_the_partition(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    store.append(id_batch(0))
    store.flush()
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
        store.flush()
    io.fail("write", 1, errno.ENOSPC, kind="state", sticky=True)  # the disk stays full
    with pytest.raises(WalFailedError, match=r"close could not cut its failed wal at seq 2"):
        store.close()
    ids = reopened_ids(root, FLUSHED_BY_CALLER)  # the partition is free: a new writer opens it
    assert {0, 1, 2} <= set(ids)
