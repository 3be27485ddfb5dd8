"""A transaction whose batches differ in nullability, metadata or (repeated) column
order is staged, committed and sealed by its living writer with every value under its
own column, its rows in the order appended, in one segment whose MANIFEST entry
holds all of it; a type change within it is refused or split, never labelled with
another type (ARCHITECTURE.md §5, §10.2).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from tests.lost_machines import APP, ROOT, staged
from tests.stores import wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _open(tmp_path: Path) -> QuiverStore:
    return QuiverStore.open(ROOT, wal_in(tmp_path / "wal"), background=False)


def _seal(store: QuiverStore, batches: list[pa.RecordBatch]) -> list[tuple[object, ...]]:
    """Append, stage, commit and seal one transaction; the rows read back."""
    txn = store.begin_txn(APP, 1)
    for b in batches:
        store.append(b, txn_id=txn)
    store.flush()
    assert store.stage_txn(txn) > 0
    assert store.commit_txn(APP, 1, [("p-0", txn)], rows=sum(b.num_rows for b in batches))
    assert store.writer is not None
    store.writer.maintain()
    store.finalize()
    out = []
    for b in store.scan():
        cols = [b.column(i).to_pylist() for i in range(b.num_columns)]
        out.extend(zip(*cols, strict=True))
    return out


def _rows(batches: list[pa.RecordBatch]) -> list[tuple[object, ...]]:
    out = []
    for b in batches:
        cols = [b.column(i).to_pylist() for i in range(b.num_columns)]
        out.extend(zip(*cols, strict=True))
    return out


def _twin(lo: int, n: int, *, nullable: bool) -> pa.RecordBatch:
    a = pa.field("id", pa.int64(), nullable=nullable)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(lo, lo + n), pa.int64()),
            pa.array([10 * i for i in range(lo, lo + n)], pa.int64()),
        ],
        schema=pa.schema([a, a]),
    )


def test_repeated_column_names_of_differing_nullability_read_back_in_place(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    batches = [_twin(0, 2, nullable=False), _twin(2, 3, nullable=True), _twin(5, 1, nullable=False)]
    assert _seal(store, batches) == _rows(batches)
    assert len(store.segments()) == 1
    assert staged() == []
    store.close()


def test_batches_differing_only_in_metadata_are_sealed_as_one_transaction(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    base = pa.record_batch({"id": pa.array([0, 1], pa.int64()), "v": pa.array(["a", "b"])})
    tagged = pa.record_batch(
        {"id": pa.array([2, 3], pa.int64()), "v": pa.array(["c", "d"])}
    ).replace_schema_metadata({"k": "v"})
    got = _seal(store, [base, tagged, base])
    assert got == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (0, "a"), (1, "b")]
    assert len(store.segments()) == 1
    assert staged() == []
    store.close()


def test_rows_handed_to_staging_under_another_type_are_never_staged(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    txn = store.begin_txn(APP, 1)
    store.append(pa.record_batch({"id": pa.array([0, 1], pa.int64())}), txn_id=txn)
    store.flush()
    narrow = pa.record_batch({"id": pa.array([0, 1], pa.int32())})
    with pytest.raises(ValueError, match="id"):  # the store's column is int64
        store.stage_txn(txn, [narrow])
    assert staged() == []
    store.close()
