"""Quiver sink: slots, concurrent queries, batch writes, schema and option checks."""

from __future__ import annotations

import os

import pytest
from chispa import assert_df_equality

from quiver_spark import QuiverStore
from tests.stores import posix_commit_log

from .sink_helpers import (
    FAST,
    INPUT_SCHEMA,
    assert_exactly_once,
    wait_for_rows,
    write_input_files,
)


def _start(df, root: str, ckpt: str, **options: str):
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in {**FAST, **options}.items():
        writer = writer.option(k, v)
    return writer.trigger(availableNow=True).start(root)


def _files_stream(spark, src: str):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)


def test_two_hundred_spark_partitions_fill_a_handful_of_store_partitions(spark, tmp_path):
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=1, rows=2000)
    q = _start(_files_stream(spark, src).repartition(200), root, ckpt)
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()
    table = wait_for_rows(root, len(keys))
    assert_exactly_once(table, keys)
    decision = posix_commit_log(root).get(q.id, 0)
    assert decision is not None
    assert len(decision.winners) == 200, "every Spark task is its own transaction"
    slots = {p for p, _ in decision.winners}
    store = QuiverStore.open(root, partition=None, create=False)
    partitions = store.partitions()
    store.close()
    assert 1 <= len(slots) <= 4, f"200 tasks on 2 cores used {len(slots)} slots: {sorted(slots)}"
    assert partitions and set(partitions) <= slots


def test_concurrent_queries_into_two_stores_keep_their_rows_apart(spark, tmp_path):
    a_src, b_src = str(tmp_path / "in-a"), str(tmp_path / "in-b")
    a_keys = write_input_files(a_src, files=2, rows=30, start=0)
    b_keys = write_input_files(b_src, files=2, rows=30, start=10_000)
    qa = _start(_files_stream(spark, a_src), str(tmp_path / "a"), str(tmp_path / "ck-a"))
    qb = _start(_files_stream(spark, b_src), str(tmp_path / "b"), str(tmp_path / "ck-b"))
    for q in (qa, qb):
        q.awaitTermination(240)
        assert q.exception() is None, q.exception()
    assert_exactly_once(wait_for_rows(str(tmp_path / "a"), len(a_keys)), a_keys)
    assert_exactly_once(wait_for_rows(str(tmp_path / "b"), len(b_keys)), b_keys)


def test_batch_append_writes_every_row_once_per_job(spark, tmp_path):
    root = str(tmp_path / "store")
    df = spark.range(0, 500, numPartitions=4).selectExpr("id as k", "cast(id as string) as v")
    df.write.format("quiver").mode("append").options(**FAST).save(root)
    df.write.format("quiver").mode("append").options(**FAST).save(root)
    table = wait_for_rows(root, 1000)
    assert sorted(table.column("k").to_pylist()) == sorted(list(range(500)) * 2)
    once = spark.createDataFrame(table).dropDuplicates(["k"])
    assert_df_equality(once, df, ignore_row_order=True, ignore_nullable=True)
    apps = os.listdir(os.path.join(root, "commits"))
    assert len(apps) == 2 and all(a.startswith("batch-") for a in apps)


def test_batch_overwrite_is_refused_with_a_clear_message(spark, tmp_path):
    root = str(tmp_path / "store")
    with pytest.raises(Exception, match="append-only") as err:
        spark.range(3).write.format("quiver").mode("overwrite").save(root)
    assert "'mode'" in str(err.value)


def test_incompatible_schema_fails_at_query_start_showing_both_schemas(spark, tmp_path):
    root = str(tmp_path / "store")
    spark.range(5).selectExpr("id as k", "'x' as v").write.format("quiver").mode("append").save(
        root
    )
    src = str(tmp_path / "in")
    write_input_files(src, files=1, rows=5)
    bad = _files_stream(spark, src).selectExpr("cast(k as string) as k", "v")
    q = _start(bad, root, str(tmp_path / "ckpt"))
    with pytest.raises(Exception) as err:
        q.awaitTermination(240)
    text = str(err.value)
    assert "incompatible schema" in text
    assert "store schema: k: int64" in text
    assert "given schema: k: string" in text
    assert wait_for_rows(root, 5).num_rows == 5, "the bad query must not have written anything"


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("retention.size_cap_policy", "drop_newest", "backpressure | drop_oldest"),
        ("segment.target_size", "32XB", "units B, KB, MB, GB"),
        ("segment.max_open_duration", "-5s", "units ms, s, m, h"),
        ("wal.flush_intervall", "25ms", "unknown option"),
    ],
)
def test_bad_option_fails_the_write_naming_option_value_and_allowed(
    spark, tmp_path, option, value, allowed
):
    root = str(tmp_path / "store")
    with pytest.raises(Exception) as err:
        spark.range(3).write.format("quiver").mode("append").option(option, value).save(root)
    text = str(err.value)
    assert option in text and repr(value) in text and allowed in text
    assert not os.path.exists(root), "a rejected write touched the store"


def test_bad_option_fails_a_stream_at_its_first_batch(spark, tmp_path):
    src, root = str(tmp_path / "in"), str(tmp_path / "store")
    write_input_files(src, files=1, rows=5)
    q = _start(_files_stream(spark, src), root, str(tmp_path / "ckpt"), **{"wal.max_size": "4QB"})
    with pytest.raises(Exception) as err:
        q.awaitTermination(240)
    text = str(err.value)
    assert "'wal.max_size'" in text and "'4QB'" in text and "1024-based" in text
    assert not os.path.exists(root)


def test_missing_path_fails_naming_the_path_option(spark, tmp_path):
    with pytest.raises(Exception) as err:
        spark.range(3).write.format("quiver").mode("append").save()
    assert "'path'" in str(err.value) and "a store directory" in str(err.value)
