"""A sink query restarted with a checkpoint written against another store.

Spark resumes the query at its checkpoint's next batch: batches already in Spark's
commit log are never written again, so with no new input the query runs no batch at
all and the second store gets nothing (not even created), and new input lands there
from the next batch on. The sink cannot refuse this (a query whose earlier batches
had no rows commits none of them either), so the driver warns at the first batch it
commits into a store holding none of the query's earlier batches (on the driver's
stderr, which the tests below read through the commit call itself). Its commit
records name the store.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from quiver_spark import QuiverStore
from quiver_spark.spark import slots
from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter
from tests.stores import posix_commit_log

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, wait_for_rows, write_input_files
from .source_helpers import committed_batches

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])
WARNING = "quiver.sink.no_earlier_batches"


def run_sink(spark: Any, src: str, root: str, ckpt: str) -> None:
    q = (
        spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
        .writeStream.format("quiver").options(**FAST).option("checkpointLocation", ckpt)
        .trigger(availableNow=True).start(root)
    )  # fmt: skip
    assert q.awaitTermination(120)
    assert q.exception() is None, q.exception()


def test_a_sink_query_restarted_against_another_store_writes_there_only_its_new_batches(
    spark: Any, tmp_path: Any
) -> None:
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    first = write_input_files(src, 2, 10)
    run_sink(spark, src, a, ckpt)
    assert_exactly_once(wait_for_rows(a, 20, **FAST), first)

    run_sink(spark, src, b, ckpt)  # nothing new: Spark runs no batch
    assert committed_batches(ckpt) == [0, 1]
    assert not os.path.exists(b), "a query that ran no batch created the store"

    later = write_input_files(src, 1, 10, start=20)
    run_sink(spark, src, b, ckpt)
    assert_exactly_once(wait_for_rows(b, 10, **FAST), later)
    assert_exactly_once(wait_for_rows(a, 20, **FAST), first)
    with QuiverStore.open(b, partition=None, create=False, background=False) as store:
        sid = store.store_id
    (app,) = os.listdir(os.path.join(b, "commits"))
    decided = posix_commit_log(b).get(app, 2)
    assert decided is not None and decided.store == sid and sid is not None
    assert posix_commit_log(b).latest_version(app) == 2  # batch 2 only


# -- the driver's commit, as the sink's commit runner calls it -----------------------------
def message(store: QuiverStore, app: str, version: int) -> QuiverCommitMessage:
    """A write task of batch ``version`` of query ``app``: two rows, durable."""
    txn = store.begin_txn(app=app, version=version, tag="0")
    batch = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    store.append(batch, txn_id=txn)
    store.flush()
    assert store.writer is not None
    return QuiverCommitMessage(app, version, store.writer.pid, txn, 2, 16, "0")


@pytest.fixture
def sink(tmp_path: Any) -> Any:
    options = {"path": str(tmp_path / "s"), "segment.max_open_duration": "600s"}
    writer = QuiverStreamWriter(options, SCHEMA, False)
    store = slots.slot_store(writer.root, writer.config, writer.storage)
    yield options, writer, store
    slots.evict(writer.root, writer.config, None, writer.storage)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


def test_the_driver_warns_once_of_a_query_whose_first_batch_here_is_not_its_first(
    sink: Any, caplog: pytest.LogCaptureFixture
) -> None:
    options, writer, store = sink
    app = f"moved-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.WARNING, logger="quiver_spark.spark.sink")
    QuiverStreamWriter(options, SCHEMA, False).commit([message(store, app, 3)], 3)
    QuiverStreamWriter(options, SCHEMA, False).commit([message(store, app, 4)], 4)
    (warned,) = warnings_of(caplog)
    assert f"query={app}" in warned and "batch=3" in warned and writer.store_id in warned
    assert "new checkpointLocation" in warned
    decided = posix_commit_log(writer.root).get(app, 3)
    assert decided is not None and decided.store == writer.store_id


def test_the_driver_does_not_warn_of_a_new_query_a_replay_or_a_query_with_history_here(
    sink: Any, caplog: pytest.LogCaptureFixture
) -> None:
    options, writer, store = sink
    new, replayed, restarted = (f"{n}-{uuid.uuid4().hex[:8]}" for n in ("new", "rp", "rs"))
    earlier = posix_commit_log(writer.root)  # another driver process, before
    earlier.commit(replayed, 5, [("x-0", 1)], 1)
    for v in range(3):
        earlier.commit(restarted, v, [("x-0", v + 1)], 1)
    caplog.set_level(logging.WARNING, logger="quiver_spark.spark.sink")
    for v in range(3):
        QuiverStreamWriter(options, SCHEMA, False).commit([message(store, new, v)], v)
    QuiverStreamWriter(options, SCHEMA, False).commit([message(store, replayed, 5)], 5)
    QuiverStreamWriter(options, SCHEMA, False).commit([message(store, restarted, 3)], 3)
    assert warnings_of(caplog) == []
