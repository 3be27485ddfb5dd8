"""A finalize that fails midway through admitting a committed transaction loses no row.

A committed transaction larger than ``segment.target_size`` is admitted record by
record, finalizing whenever the open segment reaches the target. When one of those
finalizes fails (ENOSPC creating the ``.arrow``) the records not yet admitted must
stay where the next tick finds them: in memory, or in a WAL file nobody deletes.
Guarantee: every committed row is readable exactly once after the failure heals,
both in the process that goes on and after a reopen.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import FaultyIO
from tests.stores import reopened_ids, scanned_ids

ROWS_PER_BATCH = 100
CFG = StoreConfig(
    wal=WalConfig(flush_interval_s=0),
    segment=SegmentConfig(max_open_duration_s=3600, target_size_bytes=2 * ROWS_PER_BATCH * 8 - 1),
)


def _batch(lo: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + ROWS_PER_BATCH), type=pa.int64())})


def _commit_600_rows(store: QuiverStore) -> None:
    txn = store.begin_txn("app", 1)
    for lo in range(0, 600, ROWS_PER_BATCH):
        store.append(_batch(lo), txn_id=txn)
    store.flush()
    assert store.commit_txn("app", 1, [("p-0", txn)])


def test_committed_rows_survive_one_enospc_in_the_tick_that_admits_them(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, CFG, io=io, background=False)
    _commit_600_rows(store)
    # the second segment of the admission fails to be created, once
    io.fail("open", 2, errno.ENOSPC, path_contains=".arrow")
    with pytest.raises(OSError) as failed:  # the tick reports the finalize it could not do
        store.maintain()
    assert failed.value.errno == errno.ENOSPC
    store.maintain()  # space is back: the next tick finishes the admission
    store.finalize()
    assert scanned_ids(store) == list(range(600))
    store.close()
    assert reopened_ids(root, CFG) == list(range(600))


def test_rows_of_a_failed_admission_are_not_lost_when_the_process_reopens_first(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, CFG, io=io, background=False)
    _commit_600_rows(store)
    io.fail("open", 2, errno.ENOSPC, path_contains=".arrow")
    with pytest.raises(OSError):
        store.maintain()
    store.maintain()
    store.close()
    assert reopened_ids(root, CFG) == list(range(600))
