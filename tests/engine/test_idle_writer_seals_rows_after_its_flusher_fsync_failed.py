"""Rows acknowledged before a background WAL fsync failed are sealed by the ticks.

The background flusher's fsync fails while the writer is idle: no caller is there to
be told. The rows a flush acknowledged before the failure are durable in the WAL and
wait in the open segment; a retryable condition heals by itself and "the first tick
after space returns seals what is open" (ARCHITECTURE.md §9.4), so consumers see them
within ``segment.max_open_duration`` although the writer makes no further call. A
tick that recovers still leaves the failure for the next caller of append, flush,
finalize or begin (or close), once, so no later flush acknowledges what it left
undurable.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import id_batch, scanned_ids

GROUP_FSYNC_ALWAYS_DUE = StoreConfig(
    wal=WalConfig(flush_interval_s=0.005), segment=SegmentConfig(max_open_duration_s=1e-9)
)


def _flusher_fsync_fails_after_an_acknowledged_flush(store: QuiverStore, io: FaultyIO) -> None:
    """Rows acknowledged by a flush, then rows whose append returned and whose
    background fsync fails."""
    store.append(id_batch(0))
    store.flush()  # acknowledged
    fault = io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    store.append(id_batch(10))  # returned; the flusher's fsync of it fails
    deadline = time.monotonic() + 30
    while not fault.fired and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fault.fired


def test_rows_flushed_before_a_failed_background_fsync_become_visible_to_readers(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, GROUP_FSYNC_ALWAYS_DUE, io=io, background=False)
    try:
        _flusher_fsync_fails_after_an_acknowledged_flush(store, io)
        for _ in range(3):  # maintenance ticks; the writer makes no call of its own
            try:
                store.writer.maintain()
            except OSError:
                pass
        with QuiverStore.open(root, partition=None, create=False, background=False) as reader:
            visible = scanned_ids(reader)
        assert {0, 1, 2} <= set(visible)
    finally:
        try:
            store.close()
        except OSError:
            pass


def test_the_failure_still_reaches_the_next_caller_once_after_a_tick_recovered(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, GROUP_FSYNC_ALWAYS_DUE, io=io, background=False)
    _flusher_fsync_fails_after_an_acknowledged_flush(store, io)
    store.writer.maintain()  # recovers and seals; the failure is not reported to a tick
    with pytest.raises(WalFailedError):
        store.append(id_batch(20))  # not written: the caller retries it
    store.append(id_batch(20))
    store.flush()
    store.finalize()
    assert scanned_ids(store) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    store.close()  # reported once already: nothing left to raise


def _visible(root: str) -> list[int]:
    with QuiverStore.open(root, partition=None, create=False, background=False) as reader:
        return scanned_ids(reader)


def _wait_for_no_wal_file(root: str) -> bool:
    """Whether the partition's WAL files were all removed (the seal finished) within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not list(Path(root).glob("partitions/*/wal/*.wal")):
            return True
        time.sleep(0.01)
    return False


def _wait_for(root: str, ids: list[int]) -> list[int]:
    deadline = time.monotonic() + 30
    while (seen := _visible(root)) != ids and time.monotonic() < deadline:
        time.sleep(0.05)
    return seen


def test_the_maintenance_thread_seals_the_rows_of_calls_that_returned_before_a_background_fsync_failed(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    # the ticks seal an open segment 2 s old; the flusher fsyncs every 5 ms
    cfg = StoreConfig(
        wal=WalConfig(flush_interval_s=0.005), segment=SegmentConfig(max_open_duration_s=2)
    )
    io = FaultyIO()
    store = QuiverStore.open(root, cfg, io=io)  # its maintenance thread ticks
    store.append(id_batch(0))
    store.flush()
    assert _wait_for(root, [0, 1, 2]) == [0, 1, 2]  # published; the seal goes on after
    # the publication (the MANIFEST, an fsync of the sealed WAL file, STATE, its unlink):
    # the fault below must count only fsyncs of the next append's WAL file
    assert _wait_for_no_wal_file(root), "the sealed WAL file was never removed"
    # the next append opens a new WAL file (its header fsync succeeds); the flusher's
    # fsync after it fails
    io.fail("fsync", 2, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    store.append(id_batch(10))  # returned; the flusher's fsync of it fails, the writer idles
    assert _wait_for(root, [0, 1, 2, 10, 11, 12]) == [0, 1, 2, 10, 11, 12]
    with pytest.raises(WalFailedError):
        store.close()  # no caller of append or flush was told of the failure yet
