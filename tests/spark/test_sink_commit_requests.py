"""The driver's commit of one micro-batch on an object root costs a handful of requests,
bounded by the store's partitions: it reads and creates the batch's commit record, then
seals orphaned slots from the STORE, POLICY and each partition's MANIFEST and LEASE, and
lists ``partitions/`` once for staged transactions of lost machines (ARCHITECTURE.md
§12.6). It never lists segments or commits, so its cost does not grow with the segments
or commits stored."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import quiver_spark.spark.sink as sink_module
import quiver_spark.store as store_module
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import reset_memory
from quiver_spark.objects.urls import open_objects
from quiver_spark.spark import slots
from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])


class MainThreadCounts(CountingObjects):
    """Counts only the requests of the calling (driver) thread, not the slot's
    background maintenance that shares this process in the test."""

    def _n(self, op: str) -> None:
        if threading.current_thread() is threading.main_thread():
            super()._n(op)

    def list(self, prefix: str, *, after: str | None = None) -> Any:
        if threading.current_thread() is threading.main_thread():
            self.listed.append(prefix)
        return super().list(prefix, after=after)

    listed: list[str] = []


def test_one_commit_costs_four_requests_and_two_per_partition_without_a_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reset_memory()
    url = "memory://commit-requests/store"
    options = {"path": url, "segment.max_open_duration": "600s"}
    writer = QuiverStreamWriter(options, SCHEMA, False)
    store = slots.slot_store(writer.root, writer.config, writer.storage)
    try:
        opened: list[MainThreadCounts] = []

        def counting(*a: Any, **k: Any) -> MainThreadCounts:
            opened.append(MainThreadCounts(open_objects(*a, **k)))
            return opened[-1]

        monkeypatch.setattr(store_module, "open_objects", counting)
        monkeypatch.setattr(sink_module, "open_objects", counting)
        for version in range(3):  # the cost stays flat as commits accumulate
            txn = store.begin_txn(app="app", version=version, tag="0")
            batch = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
            store.append(batch, txn_id=txn)
            store.flush()
            pid = store.writer.pid if store.writer is not None else None
            msg = QuiverCommitMessage("app", version, pid, txn, 2, 16, "0")
            opened.clear()
            MainThreadCounts.listed = []
            writer.commit([msg], version)
            counts: Counter[str] = Counter()
            for objects in opened:
                counts.update(objects.counts)
            listed = MainThreadCounts.listed
            assert listed == ["partitions/"], f"commit {version} listed {listed}: {dict(counts)}"
            assert sum(counts.values()) <= 4 + 2 * 1 + 1, f"commit {version}: {dict(counts)}"
    finally:
        slots.evict(writer.root, writer.config, None, writer.storage)
        reset_memory()
