"""A staged transaction (a task's rows in the root before its commit message,
ARCHITECTURE.md §10.2) reads back exactly as written, a retry after a lost response
is recognised, another transaction's bytes under the key are refused, and damage is
named."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from quiver_spark.errors import CorruptionError
from quiver_spark.objects.memory import MemoryObjects, reset_memory
from quiver_spark.staging import (
    drop_staged,
    read_staged,
    stage,
    staged_ids,
    staged_key,
)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    reset_memory()
    yield
    reset_memory()


def batch(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), pa.int64())})


def test_a_staged_transaction_reads_back_exactly() -> None:
    objects = MemoryObjects("st", "s")
    stage(objects, "h-0", 7, "app", 3, [batch(0, 3), batch(3, 2)])
    got = read_staged(objects, "h-0", 7)
    assert got is not None
    assert (got.partition, got.txn_id, got.app, got.version, got.rows) == ("h-0", 7, "app", 3, 5)
    assert got.table.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert staged_ids(objects, "h-0") == [7]
    drop_staged(objects, "h-0", [7])
    assert read_staged(objects, "h-0", 7) is None and staged_ids(objects, "h-0") == []


def test_a_retry_after_a_lost_response_is_recognised() -> None:
    objects = MemoryObjects("st", "s")
    calls = {"n": 0}

    def lose_first(op: str, key: str) -> None:
        if op == "create" and calls["n"] == 0:
            calls["n"] += 1
            raise OSError("response lost")

    objects.faults.after = lose_first
    assert stage(objects, "h-0", 1, "app", 0, [batch(0, 2)]) > 0
    objects.faults.after = None
    got = read_staged(objects, "h-0", 1)
    assert got is not None and got.rows == 2


def test_another_transactions_bytes_under_the_key_are_refused() -> None:
    objects = MemoryObjects("st", "s")
    stage(objects, "h-0", 1, "app", 0, [batch(0, 2)])
    with pytest.raises(FileExistsError, match="another transaction"):
        stage(objects, "h-0", 1, "other", 9, [batch(0, 5)])


def test_a_damaged_staged_transaction_is_named() -> None:
    objects = MemoryObjects("st", "s")
    stage(objects, "h-0", 1, "app", 0, [batch(0, 2)])
    key = staged_key("h-0", 1)
    got = objects.get(key)
    assert got is not None
    flipped = bytearray(got.data)
    flipped[-3] ^= 0x40
    objects.put(key, bytes(flipped))
    with pytest.raises(CorruptionError, match=r"txns/00000000000000000001\.txn"):
        read_staged(objects, "h-0", 1)
