"""A recovery that fails after the WAL cut never brings back the call that raised.

After a failed WAL fsync, the writer's next call cuts the failed file before the
records of the call that raised and writes again only what calls that returned wrote
(ARCHITECTURE.md §7.4). If the rest of that recovery then fails (a read of STATE, a
listing: the disk is still unwell), the call after it tries again. That second
attempt must keep the same cut: the caller was told the call failed and retries it,
so its rows are readable exactly once, in the process that goes on and after a reopen.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO

SYNC_EACH = StoreConfig(
    wal=WalConfig(flush_interval_s=0), segment=SegmentConfig(max_open_duration_s=3600)
)


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def _ids(store: QuiverStore) -> list[int]:
    return sorted(i for b in store.scan() for i in b.column("id").to_pylist())


def test_a_retry_after_a_recovery_that_failed_reading_state_is_read_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(_batch(0))
    io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    with pytest.raises(WalFailedError):
        store.append(_batch(100))
    # the retry's recovery cuts the WAL (reading STATE once), then fails re-reading it
    io.fail("read", 2, errno.EIO, path_contains="STATE")
    with pytest.raises(OSError):
        store.append(_batch(100))
    store.append(_batch(100))  # the caller retries again; the disk answers now
    store.flush()
    store.finalize()
    assert _ids(store) == [0, 1, 2, 100, 101, 102]
    store.close()
    with QuiverStore.open(root, SYNC_EACH, background=False) as again:
        again.finalize()
        assert _ids(again) == [0, 1, 2, 100, 101, 102]
