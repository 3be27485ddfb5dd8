"""spark.read.format("quiver"): every retained segment, metadata columns, pruning."""

from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from quiver_spark import QuiverStore
from quiver_spark.spark.source_read import METADATA_FIELDS

from .source_helpers import SCHEMA, TS_BASE_US, remove_segment_data, rows_of, write_segments


def _rows_df(spark, start, n):
    return spark.createDataFrame([tuple(r.values()) for r in rows_of(start, n).to_pylist()], SCHEMA)


def test_batch_read_returns_every_retained_row(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 3)
    write_segments(root, 2, partition="p-1", first_key=100)
    actual = spark.read.format("quiver").load(root)
    expected = _rows_df(spark, 0, 30).unionByName(_rows_df(spark, 100, 20))
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_batch_dataframe_keeps_the_segments_of_its_first_plan_and_a_new_one_sees_more(
    spark, tmp_path
):
    """As README says: a DataFrame used again reads what its first planning found; a
    new ``load`` sees the segments sealed since."""
    root = str(tmp_path / "store")
    write_segments(root, 1)
    first = spark.read.format("quiver").load(root)
    assert first.count() == 10
    write_segments(root, 1, partition="p-1", first_key=100)
    assert first.count() == 10
    assert spark.read.format("quiver").load(root).count() == 20


def test_metadata_columns_come_from_segment_metadata(spark, tmp_path):
    root = str(tmp_path / "store")
    metas = write_segments(root, 3, rows=7)
    actual = spark.read.format("quiver").option("includeMetadata", "true").load(root)
    assert actual.schema.fields[-4:] == list(METADATA_FIELDS)
    expected_rows = []
    for i, m in enumerate(metas):
        ingested = dt.datetime.fromtimestamp(m.max_ingestion_ns // 1000 / 1e6, dt.UTC)
        for r, row in enumerate(rows_of(i * 7, 7).to_pylist()):
            expected_rows.append((*row.values(), "p-0", m.seq, r, ingested))
    schema = SCHEMA + (
        ", _quiver_partition string, _quiver_segment long, _quiver_row long,"
        " _quiver_ingestion_time timestamp"
    )
    expected = spark.createDataFrame(expected_rows, schema)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_event_time_filters_prune_segments_by_min_max(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 5)  # key k has ts = base + k hours; segment i holds keys 10i..10i+9
    cut = dt.datetime.fromtimestamp(TS_BASE_US / 1e6 + 25 * 3600, dt.UTC)
    remove_segment_data(root, [1, 2])  # segments 1 and 2 end before the cut: never opened
    df = spark.read.format("quiver").load(root).where(F.col("ts") >= F.lit(cut))
    assert_df_equality(df, _rows_df(spark, 25, 25), ignore_row_order=True, ignore_nullable=True)


def test_ingestion_time_filters_prune_segments(spark, tmp_path):
    root = str(tmp_path / "store")
    metas = write_segments(root, 4)
    cut = dt.datetime.fromtimestamp(metas[2].max_ingestion_ns // 1000 / 1e6, dt.UTC)
    remove_segment_data(root, [1, 2])  # ingested before the cut: never opened
    df = (
        spark.read.format("quiver")
        .option("includeMetadata", "true")
        .load(root)
        .where(F.col("_quiver_ingestion_time") >= F.lit(cut))
        .select("k")
    )
    assert sorted(r.k for r in df.collect()) == list(range(20, 40))


def test_a_segment_a_filter_keeps_is_opened(spark, tmp_path):
    """The counterpart of the pruning tests: their proof is that a read opening a
    segment whose data file is gone fails (``failOnDataLoss`` defaults to true)."""
    root = str(tmp_path / "store")
    write_segments(root, 3)
    remove_segment_data(root, [3])
    cut = dt.datetime.fromtimestamp(TS_BASE_US / 1e6 + 15 * 3600, dt.UTC)
    with pytest.raises(Exception, match="segment 3 of partition p-0 is missing"):
        spark.read.format("quiver").load(root).where(F.col("ts") >= F.lit(cut)).collect()


def test_reading_a_store_without_schema_says_to_start_the_writer(spark, tmp_path):
    root = str(tmp_path / "store")
    QuiverStore.open(root, partition=None).close()
    with pytest.raises(Exception, match="start the writer first"):
        spark.read.format("quiver").load(root).collect()
    # a schema given by the user is enough: nothing retained, nothing read
    df = spark.read.format("quiver").schema(SCHEMA).load(root)
    assert df.count() == 0


def test_sink_to_source_round_trip_equals_input(spark, tmp_path):
    from .sink_helpers import FAST

    root = str(tmp_path / "store")
    src = _rows_df(spark, 0, 500).repartition(3)
    writer = src.write.format("quiver").mode("append")
    for k, v in FAST.items():
        writer = writer.option(k, v)
    writer.save(root)
    got = []
    q = (
        spark.readStream.format("quiver")
        .option("subscriber", "rt")
        .load(root)
        .writeStream.foreachBatch(lambda df, _id: got.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120) and q.exception() is None
    actual = spark.createDataFrame(got, SCHEMA)
    assert_df_equality(actual, src, ignore_row_order=True, ignore_nullable=True)
