"""A partition writer whose I/O failed goes on in the same process, without a reopen.

After a failed WAL write or fsync, a failed ``.meta`` publication, a failed WAL-file
deletion or a full disk, the writer's next call either continues from a state equal
to what recovery would rebuild, or recovers the partition from disk by itself
(ARCHITECTURE.md §9.4). Guarantees checked here: the error reaches a caller of
append or flush before any later flush returns; a failed fsync is never retried on
the same file; a condition that clears heals by itself; and every flushed row is
readable exactly once, in the process and after a reopen.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import SYNC_EACH, id_batch, scanned_ids

GROUP_SYNC = StoreConfig(
    wal=WalConfig(flush_interval_s=0.005), segment=SegmentConfig(max_open_duration_s=3600)
)


def _reopened(root: str) -> list[int]:
    with QuiverStore.open(root, SYNC_EACH, background=False) as store:
        store.finalize()
        ids = scanned_ids(store)
        seqs = [m.seq for m in store.segments()]
    assert seqs == list(range(1, len(seqs) + 1)), f"segment seqs not gapless: {seqs}"
    return ids


def test_a_failed_wal_write_is_raised_once_and_the_next_append_goes_on(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    io.fail("write", 1, errno.ENOSPC, path_contains=f"{os.sep}wal{os.sep}", partial=True)
    with pytest.raises(WalFailedError) as failed:
        store.append(id_batch(100))
    assert failed.value.errno == errno.ENOSPC
    store.append(id_batch(3))  # space is back: no reopen needed
    store.flush()
    assert scanned_ids(store) == [0, 1, 2]  # sealed by the recovery, through a new file
    store.close()
    assert _reopened(root) == [0, 1, 2, 3, 4, 5]


def test_a_failed_background_fsync_reaches_the_next_flush_and_is_never_retried(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, GROUP_SYNC, io=io, background=False)
    store.append(id_batch(0))
    store.flush()
    fault = io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    store.append(id_batch(3))
    while not fault.fired:  # the group fsync of the background flusher meets it
        os.sched_yield()
    failed_at = next(t for t in io.trace if t.failed)
    with pytest.raises(WalFailedError):
        store.flush()
    store.append(id_batch(6))
    store.flush()
    later = io.trace[failed_at.index + 1 :]
    assert not [t for t in later if t.op == "fsync" and t.path == failed_at.path]
    store.close()
    ids = _reopened(root)
    assert len(ids) == len(set(ids))
    assert {0, 1, 2, 6, 7, 8} <= set(ids)


def test_a_background_tick_does_not_swallow_a_wal_failure_before_a_flush_sees_it(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, GROUP_SYNC, io=io, background=False)
    store.append(id_batch(0))
    store.flush()
    fault = io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    store.append(id_batch(3))
    while not fault.fired:
        os.sched_yield()
    store.maintain()  # the tick leaves the failure for the caller
    with pytest.raises(WalFailedError):
        store.flush()
    assert store.flush() >= 0
    store.close()


def test_a_meta_whose_directory_fsync_failed_is_written_again_by_the_next_call(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    # the first fsync of the segment directory is the .arrow's, the second the .meta's
    io.fail("fsync_dir", 2, errno.EIO, path_contains=os.path.join("segments", "p-0"))
    with pytest.raises(OSError):
        store.finalize()
    mark = len(io.trace)
    store.append(id_batch(3))
    renamed = [t.path for t in io.trace[mark:] if t.op == "rename"]
    assert any(p.endswith("00000000000000000001.meta") for p in renamed), renamed
    store.finalize()
    assert scanned_ids(store) == list(range(6))
    store.close()
    assert _reopened(root) == list(range(6))


def test_a_failed_wal_file_deletion_is_finished_by_the_next_call(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    wal_dir = os.path.join(root, "partitions", "p-0", "wal")
    first = sorted(os.listdir(wal_dir))
    io.fail("fsync_dir", 1, errno.EIO, path_contains=f"{os.sep}wal")
    with pytest.raises(OSError):
        store.finalize()
    store.append(id_batch(3))
    store.finalize()
    assert not set(first) & set(os.listdir(wal_dir))
    assert scanned_ids(store) == list(range(6))
    store.close()
    assert _reopened(root) == list(range(6))


def test_a_full_disk_heals_by_itself_once_space_returns(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(10))
    txn = store.begin_txn("app", 1)
    store.append(id_batch(0), txn_id=txn)
    store.flush()
    store.commit_txn("app", 1, [("p-0", txn)])
    full = io.fail("open", 1, errno.ENOSPC, sticky=True, path_contains=".tmp")
    store.maintain()  # admits the transaction; nothing is due yet
    for _ in range(3):
        with pytest.raises(OSError):
            store.finalize()
    assert full.fired >= 3
    io.faults.remove(full)
    store.maintain()
    store.finalize()
    assert scanned_ids(store) == [0, 1, 2, 10, 11, 12]
    store.close()
    assert _reopened(root) == [0, 1, 2, 10, 11, 12]


class _NoHeartbeat(FaultyIO):
    def write_advisory(self, path: str, data: bytes) -> None:  # type: ignore[override]
        raise OSError(errno.ENOSPC, "injected: no space for the heartbeat", path)


def test_a_heartbeat_that_cannot_be_written_fails_no_tick(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = QuiverStore.open(root, SYNC_EACH, io=_NoHeartbeat(), background=False)
    store.append(id_batch(0))
    store.maintain()
    store.close()
    assert _reopened(root) == [0, 1, 2]


def test_rows_left_in_a_failed_wal_are_sealed_even_when_the_first_recovery_fails(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    io.fail("write", 1, errno.ENOSPC, path_contains=f"{os.sep}wal{os.sep}")
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
    io.fail("open", 1, errno.ENOSPC, path_contains=".arrow")
    with pytest.raises(OSError):
        store.append(id_batch(100))  # the recovery's sealing meets a full disk
    store.append(id_batch(3))
    assert scanned_ids(store) == [0, 1, 2]
    store.close()
    assert _reopened(root) == list(range(6))
