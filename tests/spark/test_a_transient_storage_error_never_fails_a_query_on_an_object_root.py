"""A transient storage error never fails a streaming query on an object root; a storage
that keeps failing fails it only once the retry budget ran out, saying so.

Every request of the query (the driver's commit records, the executors' writes, the
source's acknowledgements) goes through a fault proxy in front of the S3 server
(moto), reached through the ``storage.aws_endpoint`` option. The proxy answers
``503 SlowDown`` to one conditional write, or forwards it and loses the answer; the
store retries it with the same bytes and reads an unknown outcome back (ARCHITECTURE.md
§2.2 "Transient is not fatal"): the query goes on with its later batches and a fresh
batch read shows every row once. Answered 503 every time, the commit record of a batch
fails the query after ``storage.retry_timeout`` with a first line naming the key, the
failing storage and the budget; the batches committed before stay, and a restart once
the storage answers again completes the input exactly once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.objects import open_objects
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, s3_options, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, write_input_files
from .source_helpers import Collector, committed_batches, rows_of, run_available_now

__all__ = ["fault_proxies", "moto_s3"]

FILES, ROWS = 4, 5
"""The sink's input: one batch per file (``maxFilesPerTrigger`` 1)."""

FAULTED_BATCH = 1


class Root:
    """A store root in the bucket, seen directly and through a fault proxy."""

    def __init__(self, moto: MotoS3, proxy: FaultProxy) -> None:
        self.prefix = unique_prefix("spark-transient")
        self.url = f"{moto.url}/{self.prefix}/store"
        self.proxy = proxy
        self.storage = moto.options
        self.direct = {f"storage.{k}": str(v) for k, v in moto.options.items()}
        self.proxied = {f"storage.{k}": str(v) for k, v in s3_options(proxy.endpoint).items()}
        self.bucket_path = re.escape(self.url.removeprefix("s3:/"))

    def commit_record(self, batch: int) -> str:
        """The proxy's path pattern of the commit record of ``batch`` (any query id)."""
        return rf"{self.bucket_path}/commits/[^/]+/{batch:020d}\.commit$"

    def puts(self, path: str) -> list[tuple[int | None, bool]]:
        """(status, answered) of every PUT of ``path`` that reached the proxy."""
        return [(s.status, s.answered) for s in self.proxy.requests("PUT", path)]


@pytest.fixture
def root(moto_s3: MotoS3, fault_proxies: Callable[[], FaultProxy]) -> Root:
    return Root(moto_s3, fault_proxies())


def start_sink(spark: Any, src: str, url: str, ckpt: str, **options: str) -> Any:
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in {**FAST, **options}.items():
        writer = writer.option(k, v)
    return writer.trigger(availableNow=True).start(url)


def assert_stored_once(spark: Any, root: Root, src: str, timeout_s: float = 30.0) -> None:
    """A fresh batch read of the store (a new DataFrame each look: one plans its
    segments once) shows the input files' rows, each once, once they are sealed."""

    def stored() -> Any:
        return spark.read.format("quiver").options(**root.direct).load(root.url)

    expected = spark.read.schema(INPUT_SCHEMA).parquet(src)
    rows, deadline = expected.count(), time.monotonic() + timeout_s
    while stored().count() < rows and time.monotonic() < deadline:
        time.sleep(0.3)
    assert_df_equality(stored(), expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("action", ["503", "drop_response"])
def test_a_commit_record_write_that_met_a_transient_error_never_fails_the_query(
    spark: Any, tmp_path: Path, root: Root, action: str
) -> None:
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    write_input_files(src, files=FILES, rows=ROWS)
    record = root.commit_record(FAULTED_BATCH)
    rule = root.proxy.add_rule(method="PUT", path=record, action=action, times=1)
    q = start_sink(spark, src, root.url, ckpt, **root.proxied)
    assert q.awaitTermination(120), "the AvailableNow query did not stop by itself"
    assert q.exception() is None, f"{q.exception()}\n{root.proxy.describe()}"
    assert rule.hits, f"the commit record met no fault:\n{root.proxy.describe()}"
    assert committed_batches(ckpt) == list(range(FILES)), "later batches were not processed"
    assert len(open_objects(root.url, root.storage).list("commits/")) == FILES
    if action == "503":  # nothing written: the same PUT again lands it
        assert root.puts(record) == [(503, True), (200, True)], root.proxy.describe()
    else:  # written, answer lost: the retry meets its own record (412) and reads it back
        assert root.puts(record) == [(200, False), (412, True)], root.proxy.describe()
        assert root.proxy.requests("GET", record), "the unknown outcome was not read back"
    assert_stored_once(spark, root, src)


def test_an_acknowledgement_that_met_a_503_never_fails_a_subscriber_query(
    spark: Any, tmp_path: Path, root: Root
) -> None:
    config = StoreConfig(segment=SegmentConfig(event_time_column="ts"))
    with QuiverStore.open(
        root.url,
        config,
        partition="p-0",
        background=False,
        storage_options=root.storage,
    ) as store:
        for i in range(FILES):
            store.append(rows_of(i * ROWS, ROWS))
            store.flush()
            assert store.finalize() is not None
    ack = rf"{root.bucket_path}/subscribers/log/\d{{20}}\.ack$"
    rule = root.proxy.add_rule(method="PUT", path=ack, action="503", times=1)
    reader = spark.readStream.format("quiver").option("subscriber", "s")
    for k, v in {**root.proxied, "maxSegmentsPerTrigger": "1"}.items():
        reader = reader.option(k, v)
    got = Collector()
    run_available_now(reader.load(root.url), str(tmp_path / "ckpt"), got)
    faulted = rule.wait_hit(0).path
    assert root.puts(re.escape(faulted) + "$") == [(503, True), (200, True)], root.proxy.describe()
    assert got.keys() == list(range(FILES * ROWS)), "lost or duplicated rows"
    with QuiverStore.open(
        root.url, partition=None, create=False, storage_options=root.storage
    ) as store:
        assert store.subscribers.hwm("s", "p-0") == FILES


def test_a_storage_that_keeps_failing_fails_the_query_after_the_retry_budget_saying_so(
    spark: Any, tmp_path: Path, root: Root
) -> None:
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    write_input_files(src, files=FILES, rows=ROWS)
    record = root.commit_record(FAULTED_BATCH)
    root.proxy.add_rule(method="PUT", path=record, action="503", times=None)
    q = start_sink(spark, src, root.url, ckpt, **root.proxied, **{"storage.retry_timeout": "2s"})
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(120)
    line = str(err.value).splitlines()[0]
    key = f"{root.url}/commits/{q.id}/{FAULTED_BATCH:020d}.commit"
    assert f"RetriesExhausted: create {key}: still failing after " in line, line
    assert "the retry budget being 2s (storage.retry_timeout)" in line, line
    assert "503 Service Unavailable" in line, line
    puts = root.puts(record)
    assert len(puts) > 1 and set(puts) == {(503, True)}, root.proxy.describe()
    assert committed_batches(ckpt) == list(range(FAULTED_BATCH))

    # the storage answers again: the restart decides the failed batch and goes on, once
    q = start_sink(spark, src, root.url, ckpt, **root.direct)
    assert q.awaitTermination(120), "the restarted query did not stop by itself"
    assert q.exception() is None, q.exception()
    assert committed_batches(ckpt) == list(range(FILES))
    assert_stored_once(spark, root, src)
