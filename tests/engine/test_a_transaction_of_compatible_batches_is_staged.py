"""A transaction whose batches differ only where the store's schema rule ignores
(nullability, schema metadata: ARCHITECTURE.md §5) is staged like any other
(§10.2): ``stage_txn`` writes all its rows as one staged object, and when its machine
is lost the next observer pass seals every one of them exactly once."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.staging import read_staged
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def ids(lo: int, n: int, *, nullable: bool = False, meta: bool = False) -> pa.RecordBatch:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=nullable)])
    if meta:
        schema = schema.with_metadata({"origin": "backfill"})
    return pa.record_batch([pa.array(range(lo, lo + n), pa.int64())], schema=schema)


BATCHES = (ids(0, 2), ids(2, 3, nullable=True), ids(5, 1, meta=True))


@pytest.mark.parametrize("given", [False, True], ids=["held-batches", "given-batches"])
def test_a_transaction_of_compatible_batches_is_staged_whole(tmp_path: Path, given: bool) -> None:
    store = machine(tmp_path, "a")
    txn = store.begin_txn(APP, 1)
    for b in BATCHES:
        store.append(b, txn_id=txn)
    store.flush()
    assert store.stage_txn(txn, list(BATCHES) if given else None) > 0
    got = read_staged(MemoryObjects("lost", "s"), "p-0", txn)
    assert got is not None and got.rows == 6
    assert got.table.column("id").to_pylist() == [0, 1, 2, 3, 4, 5]


def test_its_rows_are_sealed_exactly_once_when_its_machine_is_lost(tmp_path: Path) -> None:
    lost = machine(tmp_path, "a")
    txn = lost.begin_txn(APP, 1)
    for b in BATCHES:
        lost.append(b, txn_id=txn)
    lost.flush()
    lost.stage_txn(txn)
    assert lost.commit_txn(APP, 1, [("p-0", txn)], rows=6)
    lose(lost, tmp_path / "wal-a")

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1, 2, 3, 4, 5]
