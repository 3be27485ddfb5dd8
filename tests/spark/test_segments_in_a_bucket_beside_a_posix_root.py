"""A sink and a batch read on a POSIX root whose ``segment.path`` is in a bucket
(moto's S3 server): the rows land in the bucket exactly once and read back, the
endpoint and credentials travelling only as the ``storage.<key>`` options a root in a
bucket takes, and neither the driver nor a Python worker ever imports s3fs (obstore
serves ``s3://`` for segments as for a root)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from quiver_spark import QuiverStore
from quiver_spark.objects import open_objects
from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, write_input_files

__all__ = ["moto_s3"]


def _s3fs_imported(_: int) -> bool:
    return sys.modules.get("s3fs") is not None


def _rows_when_visible(root: str, storage: dict[str, object], rows: int) -> pa.Table:
    """The store's rows once ``rows`` are visible (the sink's writer seals within
    ``segment.max_open_duration``), or after 60 s."""
    deadline = time.monotonic() + 60
    while True:
        with QuiverStore.open(
            root, partition=None, create=False, background=False, storage_options=storage
        ) as store:
            store.finalize_idle_partitions()
            table = pa.Table.from_batches(list(store.scan()), schema=store.schema())
        if table.num_rows >= rows or time.monotonic() > deadline:
            return table
        time.sleep(0.2)


def test_a_stream_lands_in_a_bucket_segment_path_and_reads_back_without_s3fs(
    spark: Any, tmp_path: Path, moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # this process: import s3fs fails
    url = f"{moto_s3.url}/{unique_prefix('spark-segs')}"
    storage = {f"storage.{k}": str(v) for k, v in moto_s3.options.items()}
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=2, rows=20)
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in {**FAST, "segment.path": url, **storage}.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(root)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()

    table = _rows_when_visible(root, moto_s3.options, len(keys))
    assert_exactly_once(table, keys)
    published = [
        o.key for o in open_objects(url, moto_s3.options).list("") if o.key.endswith(".meta")
    ]
    assert published, f"no segment in {url}"
    assert not (tmp_path / "store" / "segments").exists(), "segments written locally"
    actual = spark.read.format("quiver").options(**storage).load(root).select("k", "v", "ts")
    expected = spark.read.schema(INPUT_SCHEMA).parquet(src)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    workers = spark.sparkContext.parallelize(range(4), 4).map(_s3fs_imported).collect()
    assert workers == [False] * 4, "a Python worker imported s3fs"
