"""A worker's cached slot whose lease was lost is dropped, and the next task claims a
slot afresh (ARCHITECTURE.md §8 "Core slots", §8.2).

In one process on a ``memory://`` root; the lease is lost by removing its object
(what a renewal then finds: :class:`LeaseLostError`, as after a takeover). A task
that finds the loss before writing (a renewal already met it, or none has landed for
half the ttl and one meets it now) writes into a fresh slot; a task that meets it while
writing fails and drops the slot, and the next task writes. Only committed rows are
ever readable, each once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.layout import writer_lease
from quiver_spark.spark import slots
from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])
APP = "query-1"


def rows(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"k": pa.array(range(lo, lo + n), pa.int64()), "v": pa.array([str(k) for k in range(n)])}
    )


@pytest.fixture
def writer(bucket: str) -> Iterator[QuiverStreamWriter]:
    options = {"path": f"memory://{bucket}/store", "segment.max_open_duration": "600s"}
    w = QuiverStreamWriter(options, SCHEMA, False)
    yield w
    slots.evict(w.root, w.config, None, w.storage)


def slot(w: QuiverStreamWriter) -> QuiverStore:
    return slots.slot_store(w.root, w.config, w.storage)


def lose_lease(store: QuiverStore) -> None:
    """The slot's lease object removed: its holder's next look finds it lost."""
    assert store.writer is not None
    store.objects.delete(writer_lease(store.writer.pid))


def task(w: QuiverStreamWriter, version: int, lo: int, n: int) -> QuiverCommitMessage:
    return w._write_txn(iter([rows(lo, n)]), APP, version, f"{version}.0")


def readable_keys(w: QuiverStreamWriter) -> list[int]:
    slots.evict(w.root, w.config, None, w.storage)  # its close seals what was committed
    with QuiverStore.open(w.root, partition=None, create=False, background=False) as store:
        store.finalize_idle_partitions()
        return sorted(k for b in store.scan() for k in b.column("k").to_pylist())


def test_a_slot_whose_renewal_found_its_lease_lost_is_replaced_before_the_task_writes(
    writer: QuiverStreamWriter,
) -> None:
    first = task(writer, 0, 0, 3)
    writer.commit([first], 0)
    stale = slot(writer)
    lose_lease(stale)
    assert stale.writer is not None and stale.writer.lease is not None
    keeper = stale.writer.lease.keeper
    assert keeper is not None and keeper.tick() is False  # the renewal meets the loss

    second = task(writer, 1, 3, 4)  # no failure: a fresh slot took the rows
    assert slot(writer) is not stale and len(slots.open_slots()) == 1
    writer.commit([second], 1)
    assert readable_keys(writer) == list(range(7))


def test_a_slot_not_renewed_for_half_its_ttl_is_looked_at_before_the_task_writes(
    bucket: str,
) -> None:
    options = {"path": f"memory://{bucket}/store", "lease.ttl": "1s"}
    w = QuiverStreamWriter(options, SCHEMA, False)
    try:
        stale = slot(w)
        assert stale.writer is not None and stale.writer.lease is not None
        lease = stale.writer.lease
        assert lease.keeper is not None
        lease.keeper.stop()  # as in a paused process: nothing renews it
        lose_lease(stale)
        time.sleep(lease.ttl_s * 0.6)
        assert not lease.lost(), "nothing has looked at the lease yet"
        message = task(w, 0, 0, 2)
        assert lease.lost() and slot(w) is not stale
        w.commit([message], 0)
        assert readable_keys(w) == [0, 1]
    finally:
        slots.evict(w.root, w.config, None, w.storage)


def test_a_task_meeting_the_loss_while_writing_fails_and_the_next_task_claims_a_slot(
    writer: QuiverStreamWriter,
) -> None:
    stale = slot(writer)
    lose_lease(stale)  # unnoticed: the renewal has not run, the lease looks fresh
    with pytest.raises(LeaseLostError):
        task(writer, 0, 0, 5)  # its staging's confirmation meets the loss
    assert slots.open_slots() == [], "the slot whose lease was lost is still cached"
    retried = task(writer, 0, 100, 2)  # Spark's retry of the batch
    assert slot(writer) is not stale
    writer.commit([retried], 0)
    assert readable_keys(writer) == [100, 101], "rows of the failed task became visible"


def test_a_slot_kept_by_its_lease_is_reused_without_a_request(
    writer: QuiverStreamWriter, monkeypatch: Any
) -> None:
    held = slot(writer)
    assert held.writer is not None and held.writer.lease is not None
    calls: list[str] = []
    monkeypatch.setattr(held.writer.lease, "renew", lambda: calls.append("renew"))
    assert slot(writer) is held and calls == []
