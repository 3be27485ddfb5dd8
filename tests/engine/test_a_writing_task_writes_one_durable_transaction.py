"""One task of a writing job (:meth:`QuiverStore.write_task`): its rows become one
transaction, durable when the call returns, that the job's commit names; a task without
rows claims no slot; a task whose slot is of no more use says so before it raises."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import StoreClosedError


def rows(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def test_a_task_with_rows_writes_one_transaction_its_commit_makes_visible(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = QuiverStore.open(root, partition="p-0")
    try:
        done = QuiverStore.write_task(
            lambda: store, [rows(0, 3), rows(3, 0), rows(3, 2)], "app", 7, "0.0.1", lost=print
        )
        assert (done.partition, done.rows) == ("p-0", 5)
        assert done.bytes == rows(0, 3).nbytes + rows(3, 2).nbytes
        assert [t[:3] for t in store.writer.pending_txns()] == [(done.txn_id, "app", 7)]  # type: ignore[union-attr]
        assert store.commit_txn("app", 7, [(done.partition, done.txn_id)], done.rows)
        store.maintain()
        store.finalize()
        ids = [i for b in store.scan() for i in b.column("id").to_pylist()]
        assert sorted(ids) == list(range(5))
    finally:
        store.close()


def test_a_task_without_rows_claims_no_slot() -> None:
    def slot() -> QuiverStore:
        raise AssertionError("a task without rows claimed a slot")

    done = QuiverStore.write_task(slot, [rows(0, 0)], "app", 1, "0.0.1", lost=print)
    assert (done.partition, done.txn_id, done.rows, done.bytes) == (None, 0, 0, 0)


def test_a_task_whose_store_is_closed_reports_the_slot_lost_before_it_raises(
    tmp_path: Path,
) -> None:
    store = QuiverStore.open(str(tmp_path / "s"), partition="p-0")
    store.close()
    told: list[BaseException] = []
    with pytest.raises(StoreClosedError):
        QuiverStore.write_task(lambda: store, [rows(0, 1)], "app", 1, "t", lost=told.append)
    assert len(told) == 1 and isinstance(told[0], StoreClosedError)
