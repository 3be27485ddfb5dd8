"""Closing a writer whose WAL failed settles the failed file before the lock is released.

A close is not a crash. After a failed WAL write or fsync the close cuts the failed file
in STATE at the last acknowledged record and writes again, durably, what calls that
returned wrote (ARCHITECTURE.md §7.4), so a close that returns leaves every such row
durable and none of a call that raised. When the disk does not let it (still full),
the close still releases the partition and says, in one line, that the next open may
read back or lose unacknowledged records, as after a crash.
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
WAL = f"{os.sep}wal{os.sep}"


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def _ids(root: str) -> list[int]:
    with QuiverStore.open(root, FLUSHED_BY_CALLER, background=False) as store:
        store.finalize()
        return sorted(i for b in store.scan() for i in b.column("id").to_pylist())


def test_rows_of_a_call_that_returned_survive_a_power_loss_after_the_close_that_follows_a_failed_flush(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    QuiverStore.open(root, FLUSHED_BY_CALLER, background=False).close()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    store.append(_batch(0))
    store.flush()
    store.append(_batch(10))  # returned; not flushed yet
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.flush()
    store.close()  # returns: the rows of the append that returned are durable
    power = [s for s in sim.states(io.trace, points=[len(io.trace)]) if s.kind == "power"]
    assert len(power) == 1
    target = power[0].materialize(tmp_path / "after-power-loss")
    assert _ids(target) == [0, 1, 2, 10, 11, 12]


def test_a_close_that_cannot_cut_the_failed_wal_says_so_and_releases_the_partition(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, FLUSHED_BY_CALLER, io=io, background=False)
    store.append(_batch(0))
    store.flush()
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.append(_batch(100))
        store.flush()
    io.fail("write", 1, errno.ENOSPC, kind="state", sticky=True)  # the disk stays full
    with pytest.raises(WalFailedError, match=r"close could not cut its failed wal at seq 2"):
        store.close()
    ids = _ids(root)  # the partition is free: a new writer opens it
    assert {0, 1, 2} <= set(ids)
