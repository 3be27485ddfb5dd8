"""The driver's commit of one micro-batch on an object root costs a handful of requests,
bounded by the store's partitions: it creates the batch's commit record (no read
first); it seals orphaned slots (STORE, POLICY, each partition's MANIFEST and LEASE)
only when this machine holds a slot WAL with data whose lock no live writer holds; and
at most every ``STAGED_PASS_PERIOD_S`` it lists ``partitions/`` once for staged
transactions of lost machines (ARCHITECTURE.md §10.2). It never lists segments or
commits, so its cost does not grow with the segments
or commits stored."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import quiver_spark.store as store_module
import quiver_spark.write_jobs as write_jobs_module
from quiver_spark import QuiverStore
from quiver_spark.objects import open_objects
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import reset_memory
from quiver_spark.spark import slots
from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])


class MainThreadCounts(CountingObjects):
    """Counts only the requests of the calling (driver) thread, not the slot's
    background maintenance that shares this process in the test."""

    def _n(self, op: str, n: int = 1) -> None:
        if threading.current_thread() is threading.main_thread():
            super()._n(op, n)

    def list(self, prefix: str, *, after: str | None = None) -> Any:
        if threading.current_thread() is threading.main_thread():
            self.listed.append(prefix)
        return super().list(prefix, after=after)

    listed: list[str] = []


@contextmanager
def commits_counted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dict[str, str], QuiverStreamWriter, QuiverStore, list[MainThreadCounts]]]:
    """A sink writer of the store at ``url`` (fresh memory) and this process's slot of
    it; every object store opened from then on counts the driver thread's requests, in
    ``opened`` in the order opened. Yields (options, writer, slot store, opened)."""
    reset_memory()
    options = {"path": url, "segment.max_open_duration": "600s"}
    writer = QuiverStreamWriter(options, SCHEMA, False)
    store = slots.slot_store(writer.root, writer.config, writer.storage)
    try:
        opened: list[MainThreadCounts] = []

        def counting(*a: Any, **k: Any) -> MainThreadCounts:
            opened.append(MainThreadCounts(open_objects(*a, **k)))
            return opened[-1]

        monkeypatch.setattr(store_module, "open_objects", counting)  # the stores it opens
        monkeypatch.setattr(write_jobs_module, "open_objects", counting)  # commit records
        yield options, writer, store, opened
    finally:
        slots.evict(writer.root, writer.config, None, writer.storage)
        reset_memory()


def task_message(store: QuiverStore, version: int) -> QuiverCommitMessage:
    """A write task of batch ``version`` appends two rows to the slot as one
    transaction, durable in its WAL, and reports this message."""
    txn = store.begin_txn(app="app", version=version, tag="0")
    batch = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    store.append(batch, txn_id=txn)
    store.flush()
    pid = store.writer.pid if store.writer is not None else None
    return QuiverCommitMessage("app", version, pid, txn, 2, 16, "0")


def test_one_commit_costs_four_requests_and_two_per_partition_without_a_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "memory://commit-requests/store"
    with commits_counted(url, monkeypatch) as (_options, writer, store, opened):
        for version in range(3):  # the cost stays flat as commits accumulate
            msg = task_message(store, version)
            opened.clear()
            MainThreadCounts.listed = []
            writer.commit([msg], version)
            counts: Counter[str] = Counter()
            for objects in opened:
                counts.update(objects.counts)
            listed = MainThreadCounts.listed
            assert set(listed) <= {"partitions/"}, f"commit {version} listed {listed}"
            assert len(listed) <= 1, f"commit {version} listed {listed}"
            assert sum(counts.values()) <= 4 + 2 * 1 + 1, f"commit {version}: {dict(counts)}"


def test_a_commit_while_the_slot_lives_creates_its_record_and_asks_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "memory://commit-live-slot/store"
    with commits_counted(url, monkeypatch) as (options, _writer, store, opened):
        for version in range(3):
            msg = task_message(store, version)
            opened.clear()
            QuiverStreamWriter(options, SCHEMA, False).commit([msg], version)
            counts: Counter[str] = Counter()
            for objects in opened[1:]:  # past streamWriter()'s own open (STORE, POLICY)
                counts.update(objects.counts)
            if version > 0:  # the first commit of the process learns where the WALs are
                assert dict(counts) == {"create": 1}, f"commit {version}: {dict(counts)}"


CHILD = """
import os, sys
import pyarrow as pa
from quiver_spark import QuiverStore
s = QuiverStore.open(sys.argv[1], partition=sys.argv[2], background=False)
txn = s.begin_txn("app", 1, "0")
s.append(pa.record_batch({"k": pa.array([7, 8], pa.int64()), "v": pa.array(["x", "y"])}),
         txn_id=txn)
s.flush()
print(txn, flush=True)
os._exit(0)  # a worker that dies: its WAL holds the transaction, its lock is free
"""


def test_the_next_commit_still_seals_the_batch_of_a_slot_whose_worker_died(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    from quiver_spark import QuiverStore

    root = str(tmp_path / "store")
    options = {"path": root, "segment.max_open_duration": "600s"}
    writer = QuiverStreamWriter(options, SCHEMA, False)
    store = slots.slot_store(writer.root, writer.config, writer.storage)
    try:
        txn = store.begin_txn(app="app", version=0, tag="0")
        store.append(
            pa.record_batch({"k": pa.array([1], pa.int64()), "v": pa.array(["a"])}), txn_id=txn
        )
        store.flush()
        pid = store.writer.pid if store.writer is not None else ""
        writer.commit([QuiverCommitMessage("app", 0, pid, txn, 1, 8, "0")], 0)  # live slot
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        out = subprocess.run(
            [sys.executable, "-c", CHILD, root, "dead-0"],
            check=True, capture_output=True, text=True, env=env,
        )  # fmt: skip
        dead_txn = int(out.stdout.split()[0])
        msg = QuiverCommitMessage("app", 1, "dead-0", dead_txn, 2, 16, "0")
        QuiverStreamWriter(options, SCHEMA, False).commit([msg], 1)
        with QuiverStore.open(root, partition=None, create=False, background=False) as r:
            assert sorted(x for b in r.scan() for x in b.column("k").to_pylist()) == [7, 8]
    finally:
        slots.evict(writer.root, writer.config, None, writer.storage)
