"""Rows acknowledged before a background WAL fsync failed are sealed by the ticks.

The background flusher's fsync fails while the writer is idle: no caller is there to
be told. The rows a flush acknowledged before the failure are durable in the WAL and
wait in the open segment; a retryable condition heals by itself and "the first tick
after space returns seals what is open" (ARCHITECTURE.md §7.4), so consumers see them
within ``segment.max_open_duration`` although the writer makes no further call.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import FaultyIO

GROUP_FSYNC_ALWAYS_DUE = StoreConfig(
    wal=WalConfig(flush_interval_s=0.005), segment=SegmentConfig(max_open_duration_s=1e-9)
)


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def test_rows_flushed_before_a_failed_background_fsync_become_visible_to_readers(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, GROUP_FSYNC_ALWAYS_DUE, io=io, background=False)
    try:
        store.append(_batch(0))
        store.flush()  # acknowledged
        fault = io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
        store.append(_batch(10))  # returned; the flusher's fsync of it fails
        deadline = time.monotonic() + 30
        while not fault.fired and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fault.fired
        for _ in range(3):  # maintenance ticks; the writer makes no call of its own
            try:
                store.writer.maintain()
            except OSError:
                pass
        with QuiverStore.open(root, partition=None, create=False, background=False) as reader:
            visible = sorted(i for b in reader.scan() for i in b.column("id").to_pylist())
        assert {0, 1, 2} <= set(visible)
    finally:
        try:
            store.close()
        except OSError:
            pass
