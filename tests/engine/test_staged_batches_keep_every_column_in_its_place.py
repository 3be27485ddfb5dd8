"""A staged transaction holds each batch's values under the columns they were written
under, or staging refuses in one line naming the columns (ARCHITECTURE.md §5, §10.2).

Batches the store takes as one schema (same column names and types in the same order;
nullability and metadata aside) are staged under their union, whatever their column
names are, duplicates included; batches the store would not take as one schema are
never re-labelled: a column's values never move under another column's name.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.staging import decode_staged, encode_staged, read_staged
from tests.lost_machines import APP, machine

pytestmark = pytest.mark.usefixtures("fresh_memory")


def batch(cols: list[tuple[str, bool, list[int]]]) -> pa.RecordBatch:
    schema = pa.schema([pa.field(n, pa.int64(), nullable=nullable) for n, nullable, _ in cols])
    return pa.record_batch([pa.array(v, pa.int64()) for _, _, v in cols], schema=schema)


def test_a_transaction_with_a_repeated_column_name_is_staged_when_nullability_differs(
    tmp_path: Path,
) -> None:
    store = machine(tmp_path, "a")
    txn = store.begin_txn(APP, 1)
    store.append(batch([("id", True, [1]), ("id", False, [2])]), txn_id=txn)
    store.append(batch([("id", False, [3]), ("id", True, [4])]), txn_id=txn)  # taken
    store.flush()
    assert store.stage_txn(txn) > 0
    got = read_staged(MemoryObjects("lost", "s"), "p-0", txn)
    assert got is not None
    assert [c.to_pylist() for c in got.table.columns] == [[1, 3], [2, 4]]
    store.close()


def test_batches_with_their_columns_in_another_order_are_never_relabelled() -> None:
    first = batch([("a", True, [1]), ("b", False, [2])])
    swapped = batch([("b", True, [20]), ("a", True, [10])])  # b=20, a=10
    try:
        raw = encode_staged("p-0", 1, APP, 1, [first, swapped])
    except ValueError as e:  # refused, in one line saying what refused
        assert "\n" not in str(e) and "staged transaction" in str(e)
        return
    table = decode_staged("staged", raw).table
    assert table.column("a").to_pylist() == [1, 10]
    assert table.column("b").to_pylist() == [2, 20]


@pytest.mark.parametrize(
    "other",
    [
        batch([("di", True, [2])]),
        batch([("id", True, [2]), ("x", True, [3])]),
        pa.record_batch([pa.array(["2"])], names=["id"]),
    ],
    ids=["renamed-column", "extra-column", "retyped-column"],
)
def test_batches_of_other_columns_are_refused_in_one_line_naming_them(
    other: pa.RecordBatch,
) -> None:
    with pytest.raises(ValueError) as e:
        encode_staged("p-0", 1, APP, 1, [batch([("id", False, [1])]), other])
    msg = str(e.value)
    assert "\n" not in msg
    assert "staged transaction" in msg  # what refused
    assert all(name in msg for name in other.schema.names)  # and what was wrong
