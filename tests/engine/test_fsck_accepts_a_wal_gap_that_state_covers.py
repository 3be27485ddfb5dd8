"""fsck calls a WAL gap healthy when STATE's ``covered`` holds it, as recovery does.

A sealed WAL file whose every record is in a segment is deleted even while an earlier
file is kept (its undecided transaction is still needed): its whole seq range goes
into STATE's ``covered`` before the unlink, and recovery accepts the gap between the
two kept files exactly when ``covered`` holds it (ARCHITECTURE.md §4, Rotation). fsck
reads the same files and STATE, so it reports that store healthy; it names a gap only
when ``covered`` does not hold it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.fsck import check_store

SMALL_FILES = StoreConfig(
    wal=WalConfig(flush_interval_s=0, file_size_bytes=600),
    segment=SegmentConfig(max_open_duration_s=3600),
)


def _batch(lo: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def test_a_store_whose_middle_wal_file_was_deleted_as_unneeded_is_healthy(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, SMALL_FILES, background=False) as store:
        txn = store.begin_txn("app", 1)  # undecided: keeps the first WAL file
        store.append(_batch(100), txn_id=txn)
        for i in range(3):
            store.append(_batch(i * 10))
            store.finalize()  # its WAL file is unneeded and deleted
        store.append(_batch(500))
        store.flush()
        wal = sorted((tmp_path / "s" / "partitions" / "p-0" / "wal").glob("*.wal"))
        assert len(wal) == 2 and wal[0].name == f"{1:020d}.wal"  # a gap between them
        store.writer.close(finalize=False)
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        report = check_store(store)
    with QuiverStore.open(root, SMALL_FILES, background=False) as again:  # recovery accepts it
        assert [t[0] for t in again.writer.pending_txns()] == [txn]
    assert [(f.kind, f.reason) for f in report.problems] == []
    assert report.healthy()
