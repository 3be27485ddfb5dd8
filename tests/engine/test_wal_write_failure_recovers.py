"""A writer whose WAL write failed once works again, in the same process, once the
disk works again: the next append recovers by itself (no reopen needed), and every row
acknowledged before and after the failure is readable exactly once."""

from __future__ import annotations

import errno

import pyarrow as pa

from quiver_spark import QuiverStore, StoreConfig, WalConfig
from tests.faults import FaultyIO


def _batch(keys: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"k": pa.array(keys, type=pa.int64())})


def _config() -> StoreConfig:
    return StoreConfig(wal=WalConfig(flush_interval_s=0.0))


def test_an_append_after_one_failed_wal_write_succeeds_on_the_same_handle(tmp_path):
    io = FaultyIO()
    root = str(tmp_path / "store")
    store = QuiverStore.open(root, _config(), partition="p-0", io=io, background=False)
    try:
        store.append(_batch([1, 2]))
        io.fail("write", 1, errno.ENOSPC, kind="wal")
        try:
            store.append(_batch([3]))
        except OSError:
            pass  # the failed append surfaces; the disk has space again afterwards
        store.append(_batch([4, 5]))  # the same handle, the condition cleared
        store.finalize()
        rows = sorted(k for b in store.scan() for k in b.column("k").to_pylist())
    finally:
        store.close()
    assert rows in ([1, 2, 4, 5], [1, 2, 3, 4, 5])
