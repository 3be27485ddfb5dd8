"""The quiver sink end to end on a real local Spark (exactly once under task retries, repeated commits and batch reruns)."""

from __future__ import annotations

import os

from chispa import assert_df_equality

from tests.stores import posix_commit_log

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


PAD = "x" * 2000  # ~2 KB rows: a 100-row UDF result batch is written through, not buffered


def _wal_bytes(root: str) -> int:
    import glob

    return sum(
        os.path.getsize(p) for p in glob.glob(os.path.join(root, "partitions", "*", "wal", "*"))
    )


def _fail_once_udf(marker: str, root: str, after_rows: int):
    """A UDF whose partition-0 first attempt raises once (the marker file says so).

    With ``after_rows`` > 0 it first lets that many rows through, waits until the sink's
    WAL on disk has grown (the rows were appended and group-fsynced), records the
    growth in the marker, then raises.
    """
    from pyspark.sql.functions import udf

    seen = [0]
    wal_at_start = [-1]

    def pad(k: int, v: str) -> str:
        import os
        import time

        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc.attemptNumber() == 0 and tc.partitionId() == 0 and not os.path.exists(marker):
            if wal_at_start[0] < 0:
                wal_at_start[0] = _wal_bytes(root)
            if seen[0] >= after_rows:
                grown = 0
                deadline = time.monotonic() + 20
                while after_rows and grown <= 0 and time.monotonic() < deadline:
                    time.sleep(0.2)
                    grown = _wal_bytes(root) - wal_at_start[0]
                with open(marker, "w") as f:
                    f.write(str(grown))
                raise RuntimeError(f"injected failure on attempt 0 after {seen[0]} rows")
            seen[0] += 1
        return v + PAD

    return udf(pad, "string", useArrow=False)


def _retried_stream_is_exactly_once(spark, tmp_path, after_rows: int) -> int:
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    marker = str(tmp_path / "failed-once")
    keys = write_input_files(src, files=2, rows=200)
    df = _stream(spark, src, files_per_trigger=2)
    df = df.select("k", _fail_once_udf(marker, root, after_rows)("k", "v").alias("v"), "ts")
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(conf)
    spark.conf.set(conf, "10")  # the sink gets rows while the upstream task still runs
    try:
        _run_available_now(df, root, ckpt)
    finally:
        spark.conf.set(conf, old)
    assert os.path.exists(marker), "the injected failure never fired"
    table = wait_for_rows(root, len(keys))
    assert_exactly_once(table, keys)
    assert set(table.column("v").to_pylist()) == {f"value-{k}{PAD}" for k in keys}
    with open(marker) as f:
        return int(f.read())


def test_task_failing_on_first_attempt_before_writing_is_retried_exactly_once(spark, tmp_path):
    _retried_stream_is_exactly_once(spark, tmp_path, after_rows=0)


def test_task_failing_on_first_attempt_after_durable_writes_is_retried_exactly_once(
    spark, tmp_path
):
    grown = _retried_stream_is_exactly_once(spark, tmp_path, after_rows=150)
    assert grown > 0, "the failed attempt had written nothing durable before it raised"


def test_commit_called_twice_for_a_batch_is_a_no_op(spark, tmp_path):
    from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter

    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=1, rows=30)
    df = _stream(spark, src)
    writer = df.writeStream.format("quiver").option("checkpointLocation", ckpt)
    for k, v in FAST.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(root)
    q.awaitTermination(180)
    app = q.id
    before = posix_commit_log(root).get(app, 0)
    assert before is not None and before.rows == 30
    path = posix_commit_log(root).path(app, 0)
    raw = open(path, "rb").read()

    again = QuiverStreamWriter({"path": root, **FAST}, df.schema, False)
    replay = [QuiverCommitMessage(app, 0, p, t, 30, 0) for p, t in before.winners]
    rogue = QuiverCommitMessage(app, 0, sorted(before.winners)[0][0], 999_999, 30, 0)
    again.commit([*replay, rogue, None], 0)
    again.commit(replay, 0)

    assert open(path, "rb").read() == raw, "a replayed commit rewrote the decision"
    assert posix_commit_log(root).get(app, 0).winners == before.winners
    assert_exactly_once(wait_for_rows(root, len(keys)), keys)


def test_batch_rerun_after_losing_its_checkpoint_commit_entry_adds_no_duplicates(spark, tmp_path):
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=3, rows=20)
    _run_available_now(_stream(spark, src), root, ckpt)
    commits = os.path.join(ckpt, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    assert last == 2
    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")  # Hadoop's checksum file refuses a rewrite
    if os.path.exists(crc):
        os.remove(crc)
    _run_available_now(_stream(spark, src), root, ckpt)
    assert os.path.exists(os.path.join(commits, str(last))), "Spark did not rerun the batch"
    table = wait_for_rows(root, len(keys))
    assert_exactly_once(table, keys)
