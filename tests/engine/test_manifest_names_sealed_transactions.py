"""The MANIFEST of an object root names, per entry, the transactions whose rows the
segment holds (ARCHITECTURE.md §11.1, §10.2); a manifest without that column (an
older one, or any POSIX root's) reads as "no transactions", a POSIX root's bytes
never carry it, and the ids of entries retention removes are kept so that a staged
object left behind is never sealed again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.manifest import Manifest, ManifestEntry
from quiver_spark.format import decode_frame
from quiver_spark.objects.memory import reset_memory


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    reset_memory()
    yield
    reset_memory()
    lease_mod._seen.clear()


def entry(seq: int, txns: tuple[int, ...] = ()) -> ManifestEntry:
    return ManifestEntry("p-0", seq, 100, 50, 10, 1, seq, seq, txns=txns)


def ids(n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(n), pa.int64())})


def write_txns(url: str, wal: Path) -> bytes:
    cfg = StoreConfig(
        wal=WalConfig(path=str(wal), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
    )
    with QuiverStore.open(url, cfg, partition="p-0", background=False) as s:
        t = s.begin_txn("q", 0)
        s.append(ids(3), txn_id=t)
        s.flush()
        s.stage_txn(t)
        s.commit_txn("q", 0, [("p-0", t)], 3)
        s.close()
        got = s.objects.get("partitions/p-0/MANIFEST")
        assert got is not None
        return got.data


def test_a_manifest_without_the_transaction_columns_reads_as_no_transactions() -> None:
    old = Manifest("p-0").published([entry(1), entry(2)])
    raw = old.encode()
    body = decode_frame("m", b"QMAN", raw)
    assert "txns" not in body["segments"] and "txns_gone" not in body
    back = Manifest.decode("m", raw)
    assert back.sealed_txns() == set() and all(e.txns == () for e in back.entries)


def test_an_object_root_records_the_transactions_of_a_sealed_segment(tmp_path: Path) -> None:
    raw = write_txns("memory://mt/s", tmp_path / "wal")
    m = Manifest.decode("m", raw)
    assert len(m.entries) == 1 and len(m.entries[0].txns) == 1
    assert m.entries[0].sealed_by is None  # sealed from its writer's WAL


def test_a_posix_root_records_no_transactions(tmp_path: Path) -> None:
    raw = write_txns(str(tmp_path / "store"), tmp_path / "wal")
    body = decode_frame("m", b"QMAN", raw)
    assert set(body["segments"]) == {
        "seq", "size_bytes", "meta_bytes", "rows", "batches", "min_ingestion_ns",
        "max_ingestion_ns", "min_event_time", "max_event_time",
    }  # fmt: skip
    assert "txns_gone" not in body


def test_the_transactions_of_removed_entries_stay_known_as_sealed() -> None:
    m = Manifest("p-0").published([entry(1, (5, 6)), entry(2, (9,))])
    gone = Manifest.decode("m", m.removed([1]).encode())
    assert gone.sealed_txns() == {5, 6, 9}
    assert [e.seq for e in gone.entries] == [2]
