"""A committed transaction whose batches repeat a column name and differ only in
nullability loses none of its rows when its machine is lost while its writer seals
it (ARCHITECTURE.md §10.2).

Staging takes such batches as one schema (the store does) and stages them under
their union; the writer's open segment must take them the same way, or the
transaction is sealed in two parts, the MANIFEST names it after the first, and its
staged object becomes garbage while the second part is only on the lost disk.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry

pytestmark = pytest.mark.usefixtures("fresh_memory")


def twin(lo: int, n: int, *, nullable: bool) -> pa.RecordBatch:
    f = pa.field("id", pa.int64(), nullable=nullable)
    col = pa.array(range(lo, lo + n), pa.int64())
    return pa.RecordBatch.from_arrays([col, col], schema=pa.schema([f, f]))


def test_a_machine_lost_while_sealing_a_transaction_of_repeated_columns_loses_none_of_its_rows(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    txn = lost.begin_txn(APP, 1)
    lost.append(twin(0, 2, nullable=False), txn_id=txn)
    lost.append(twin(2, 3, nullable=True), txn_id=txn)  # one schema to the store
    lost.flush()
    assert lost.stage_txn(txn) > 0
    assert lost.commit_txn(APP, 1, [("p-0", txn)], rows=5)
    assert lost.writer is not None
    lost.writer.maintain()  # resolves it into the open segment
    lose(lost, tmp_path / "wal-a")  # before the open segment is sealed

    clock = Clock()
    obs = observer(tmp_path, clock)
    seal_after_expiry(obs, clock)
    got = sorted(x for b in obs.scan() for x in b.column(0).to_pylist())
    assert got == [0, 1, 2, 3, 4]
