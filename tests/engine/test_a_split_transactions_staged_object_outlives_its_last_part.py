"""A committed transaction whose rows the writer seals in two segments keeps its
staged object until its last part is sealed (ARCHITECTURE.md §10.2).

The open segment holds one physical schema; a transaction whose batches differ in
nullability (which the store takes as one schema, and stages under their union) is
sealed in two parts. Once the first part is published the MANIFEST names the
transaction; if the staged object is deleted then, losing the machine before the
second part is sealed loses committed rows that no other copy holds.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def ids(lo: int, n: int, *, nullable: bool) -> pa.RecordBatch:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=nullable)])
    return pa.record_batch([pa.array(range(lo, lo + n), pa.int64())], schema=schema)


def test_a_machine_lost_between_the_two_parts_of_a_transaction_loses_none_of_its_rows(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    txn = lost.begin_txn(APP, 1)
    lost.append(ids(0, 2, nullable=False), txn_id=txn)
    lost.append(ids(2, 3, nullable=True), txn_id=txn)  # the same schema to the store
    lost.flush()
    assert lost.stage_txn(txn) > 0
    assert lost.commit_txn(APP, 1, [("p-0", txn)], rows=5)
    assert lost.writer is not None
    lost.writer.maintain()  # resolves it: its first part is sealed, the rest is open
    lose(lost, tmp_path / "wal-a")  # before the open segment is sealed

    clock = Clock()
    obs = observer(tmp_path, clock)
    seal_after_expiry(obs, clock)
    assert scanned_ids(obs) == [0, 1, 2, 3, 4]
