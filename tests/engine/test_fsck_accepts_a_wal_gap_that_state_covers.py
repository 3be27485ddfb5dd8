"""fsck calls a WAL gap healthy when STATE's ``covered`` holds it, as recovery does.

A sealed WAL file whose every record is in a segment is deleted even while an earlier
file is kept (its undecided transaction is still needed): its whole seq range goes
into STATE's ``covered`` before the unlink, and recovery accepts the gap between the
two kept files exactly when ``covered`` holds it (ARCHITECTURE.md §4.2, Rotation). fsck
reads the same files and STATE, so it reports that store healthy; it names a gap only
when ``covered`` does not hold it.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.fsck import check_store
from tests.stores import id_batch

SMALL_FILES = StoreConfig(
    wal=WalConfig(flush_interval_s=0, file_size_bytes=600),
    segment=SegmentConfig(max_open_duration_s=3600),
)


def test_a_store_whose_middle_wal_file_was_deleted_as_unneeded_is_healthy(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, SMALL_FILES, background=False) as store:
        txn = store.begin_txn("app", 1)  # undecided: keeps the first WAL file
        store.append(id_batch(100), txn_id=txn)
        for i in range(3):
            store.append(id_batch(i * 10))
            store.finalize()  # its WAL file is unneeded and deleted
        store.append(id_batch(500))
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


def _store_with_every_wal_file_kept(root: str) -> list[Path]:
    """Nothing finalized: every WAL file is kept and STATE covers nothing."""
    with QuiverStore.open(root, SMALL_FILES, background=False) as store:
        for i in range(4):
            store.append(id_batch(i * 10))
        store.flush()
        store.writer.close(finalize=False)
    wal = sorted((Path(root) / "partitions" / "p-0" / "wal").glob("*.wal"))
    assert len(wal) >= 3
    return wal


def test_a_gap_nothing_covers_is_still_named(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    wal = _store_with_every_wal_file_kept(root)
    wal[1].unlink()  # its records were never in a segment
    lo, hi = int(wal[1].stem), int(wal[2].stem) - 1
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        report = check_store(store)
    assert [(f.kind, f.file, f.reason) for f in report.problems] == [
        (
            "wal",
            str(wal[2]),
            f"wal files not contiguous: expected first seq {lo}, found {hi + 1} "
            f"(STATE's covered does not hold seqs {lo}..{hi})",
        )
    ]
    assert not report.healthy()


def test_a_gap_covered_only_in_part_is_named(tmp_path: Path) -> None:
    """The file after the covered range is gone as well: seqs 10.. are held by nothing."""
    root = str(tmp_path / "s")
    with QuiverStore.open(root, SMALL_FILES, background=False) as store:
        txn = store.begin_txn("app", 1)
        store.append(id_batch(100), txn_id=txn)
        for i in range(3):
            store.append(id_batch(i * 10))
            store.finalize()
        store.append(id_batch(500))
        store.flush()
        store.append(id_batch(600))  # a third file after the one at seq 10
        store.append(id_batch(700))
        store.flush()
        store.writer.close(finalize=False)
    wal = sorted((tmp_path / "s" / "partitions" / "p-0" / "wal").glob("*.wal"))
    assert [int(p.stem) for p in wal[:2]] == [1, 10] and len(wal) >= 3
    wal[1].unlink()
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        report = check_store(store)
    assert [(f.kind, f.file) for f in report.problems] == [("wal", str(wal[2]))]
    assert "does not hold seqs 4.." in report.problems[0].reason
