"""The quiver sink end to end on a real local Spark (exactly once, T17, T18)."""

from __future__ import annotations

import os

from chispa import assert_df_equality

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, wait_for_rows, write_input_files


def _stream(spark, src: str, files_per_trigger: int = 1):
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(src)
    )


def _run_available_now(df, root: str, ckpt: str, **options: str) -> None:
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in {**FAST, **options}.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(root)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert not q.isActive


def test_file_stream_lands_in_segments_exactly_once(spark, tmp_path):
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=3, rows=40)
    _run_available_now(_stream(spark, src), root, ckpt)
    table = wait_for_rows(root, len(keys))
    assert_exactly_once(table, keys)
    actual = spark.createDataFrame(table)
    expected = spark.read.schema(INPUT_SCHEMA).parquet(src)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert os.path.isdir(os.path.join(root, "commits"))
