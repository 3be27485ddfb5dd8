"""Exactly once with the store's root in a bucket (moto's S3 server), nothing shared on disk.

The sink and the source keep their promises when ``path`` is ``s3://bucket/prefix``
and the endpoint and credentials travel only as ``storage.<key>`` options: a batch
Spark runs again after losing its commit entry adds no duplicate; two subscribers at
different paces each get every row once and the segments both acknowledged are
deleted from the bucket; a stream failed mid-batch and restarted from its checkpoint
replays that batch with the same rows and continues exactly once.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.objects import open_objects
from quiver_spark.subscribers import StartPosition
from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, write_input_files
from .source_helpers import Collector, committed_batches, rows_of, run_available_now

__all__ = ["moto_s3"]

ROWS = 10


@pytest.fixture
def bucket_root(moto_s3: MotoS3) -> tuple[str, dict[str, Any]]:
    return f"{moto_s3.url}/{unique_prefix('spark')}/store", dict(moto_s3.options)


def spark_options(storage: dict[str, Any]) -> dict[str, str]:
    return {f"storage.{k}": str(v) for k, v in storage.items()}


def open_store(url: str, storage: dict[str, Any], **kw: Any) -> QuiverStore:
    return QuiverStore.open(url, storage_options=storage, background=False, **kw)


def store_rows(url: str, storage: dict[str, Any]) -> Any:
    import pyarrow as pa

    with open_store(url, storage, partition=None, create=False) as store:
        store.finalize_idle_partitions()
        schema = store.schema()
        assert schema is not None, f"{url} has no schema: nothing was written"
        return pa.Table.from_batches(list(store.scan()), schema=schema)


def bucket_segments(url: str, storage: dict[str, Any]) -> list[int]:
    """Seqs whose ``.meta`` object is in the bucket under ``segments/p-0/``."""
    objects = open_objects(url, storage)
    return sorted(
        int(o.key.rsplit("/", 1)[1].split(".")[0])
        for o in objects.list("segments/p-0/")
        if o.key.endswith(".meta")
    )


def write_segments(url: str, storage: dict[str, Any], segments: int, first_key: int = 0) -> None:
    config = StoreConfig(segment=SegmentConfig(event_time_column="ts"))
    with open_store(url, storage, config=config, partition="p-0") as store:
        for i in range(segments):
            store.append(rows_of(first_key + i * ROWS, ROWS))
            store.flush()
            assert store.finalize() is not None


def hwm(url: str, storage: dict[str, Any], subscriber: str) -> int:
    with open_store(url, storage, partition=None, create=False) as store:
        return store.subscribers.hwm(subscriber, "p-0")


def stream(spark: Any, url: str, storage: dict[str, Any], subscriber: str, **options: str) -> Any:
    reader = spark.readStream.format("quiver").option("subscriber", subscriber)
    for k, v in {**spark_options(storage), **options}.items():
        reader = reader.option(k, v)
    return reader.load(url)


def _sink_available_now(spark: Any, src: str, url: str, storage: dict[str, Any], ckpt: str) -> None:
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in {**FAST, **spark_options(storage)}.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(url)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()


def test_a_batch_run_again_after_losing_its_commit_entry_adds_no_duplicate_in_the_bucket(
    spark: Any, tmp_path: Any, bucket_root: tuple[str, dict[str, Any]]
) -> None:
    url, storage = bucket_root
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=3, rows=20)
    _sink_available_now(spark, src, url, storage, ckpt)
    commits = os.path.join(ckpt, "commits")
    assert committed_batches(ckpt) == [0, 1, 2]
    os.remove(os.path.join(commits, "2"))
    if os.path.exists(os.path.join(commits, ".2.crc")):
        os.remove(os.path.join(commits, ".2.crc"))
    _sink_available_now(spark, src, url, storage, ckpt)
    assert committed_batches(ckpt) == [0, 1, 2], "Spark did not run batch 2 again"
    assert_exactly_once(store_rows(url, storage), keys)
    decided = [o.key for o in open_objects(url, storage).list("commits/")]
    assert len(decided) == 3, decided
    assert not (tmp_path / "store").exists()


def test_two_subscribers_each_get_every_row_once_and_both_acked_segments_leave_the_bucket(
    spark: Any, tmp_path: Any, bucket_root: tuple[str, dict[str, Any]]
) -> None:
    url, storage = bucket_root
    write_segments(url, storage, 4)
    with open_store(url, storage, partition=None, create=False) as store:
        for sub in ("fast", "slow"):
            store.subscribers.register(
                sub, start=StartPosition.EARLIEST, retained={"p-0": [1, 2, 3, 4]}
            )
    fast, slow = Collector(), Collector()
    run_available_now(stream(spark, url, storage, "fast"), str(tmp_path / "cf"), fast)
    assert bucket_segments(url, storage) == [1, 2, 3, 4], "deleted before 'slow' acked"
    run_available_now(
        stream(spark, url, storage, "slow", maxSegmentsPerTrigger="1"), str(tmp_path / "cs"), slow
    )
    assert fast.keys() == slow.keys() == list(range(40))
    assert hwm(url, storage, "fast") == hwm(url, storage, "slow") == 4
    assert bucket_segments(url, storage) == [], "segments both acked are still in the bucket"


class _FailingOnce(Collector):
    """Keeps batch ``fail_at``'s rows, then fails it once: offsets/N logged, commits/N not."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def __call__(self, df: Any, batch_id: int) -> None:
        super().__call__(df, batch_id)
        if batch_id == self.fail_at:
            raise RuntimeError(f"injected failure in batch {batch_id}")


def test_a_stream_failed_mid_batch_restarts_from_its_checkpoint_and_continues_exactly_once(
    spark: Any, tmp_path: Any, bucket_root: tuple[str, dict[str, Any]]
) -> None:
    url, storage = bucket_root
    ckpt = str(tmp_path / "ckpt")
    write_segments(url, storage, 5)
    first = _FailingOnce(fail_at=1)
    q = (
        stream(spark, url, storage, "r", maxSegmentsPerTrigger="2")
        .writeStream.foreachBatch(first)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="injected failure in batch 1"):
        q.awaitTermination(120)
    assert committed_batches(ckpt) == [0]
    assert bucket_segments(url, storage) == [3, 4, 5], "batch 1's segments are pinned"
    second = Collector()
    run_available_now(stream(spark, url, storage, "r", maxSegmentsPerTrigger="2"), ckpt, second)
    assert second.calls[0] == 1 and second.batches[1] == first.batches[1]
    delivered = sorted(r[0] for b in (first.batches[0], *second.batches.values()) for r in b)
    assert delivered == list(range(50)), "lost or duplicated rows after the restart"
    assert hwm(url, storage, "r") == 5
    assert bucket_segments(url, storage) == []
