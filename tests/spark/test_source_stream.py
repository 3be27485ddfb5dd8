"""The quiver source as a stream on a real local Spark: offsets, limits, acks, replay."""

from __future__ import annotations

import shutil
import time

import pytest
from chispa import assert_df_equality

from quiver_spark.subscribers import StartPosition, SubscriberRegistry

from .source_helpers import (
    SCHEMA,
    Collector,
    checkpoint_offsets,
    committed_batches,
    registry_hwm,
    run_available_now,
    segment_files,
    stream,
    wait_until,
    write_segments,
)


def _expected(spark, keys):
    from .source_helpers import rows_of

    rows = rows_of(keys[0], len(keys)).to_pylist()
    return spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA)


def test_available_now_drains_every_segment_in_limited_batches_and_stops(spark, tmp_path):
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 5)
    sink = Collector()
    q = run_available_now(stream(spark, root, "a", maxSegmentsPerTrigger="2"), ckpt, sink)
    assert not q.isActive
    assert [len(sink.batches[b]) for b in sorted(sink.batches)] == [20, 20, 10]
    actual = spark.createDataFrame([r for b in sink.batches.values() for r in b], SCHEMA)
    assert_df_equality(actual, _expected(spark, list(range(50))), ignore_row_order=True,
                       ignore_nullable=True)
    # Spark plans once more after the last batch is in its commit log (to find the
    # end): that planning acknowledges it, so every segment is acked and reclaimed
    assert segment_files(root) == []
    assert registry_hwm(root, "a") == 5


def test_row_and_byte_limits_bound_each_batch_and_always_admit_one_segment(spark, tmp_path):
    r1, r2 = str(tmp_path / "s1"), str(tmp_path / "s2")
    write_segments(r1, 4)
    write_segments(r2, 4)
    by_rows, by_bytes = Collector(), Collector()
    run_available_now(stream(spark, r1, "rows", maxRowsPerTrigger="25"),
                      str(tmp_path / "c1"), by_rows)
    run_available_now(stream(spark, r2, "bytes", maxBytesPerTrigger="1B"),
                      str(tmp_path / "c2"), by_bytes)
    assert [len(by_rows.batches[b]) for b in sorted(by_rows.batches)] == [20, 20]
    assert [len(by_bytes.batches[b]) for b in sorted(by_bytes.batches)] == [10, 10, 10, 10]
    assert by_rows.keys() == by_bytes.keys() == list(range(40))


def test_two_subscribers_at_different_paces_each_get_every_row_once(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 5)
    with SubscriberRegistry.open(root) as reg:  # both exist before data is consumed
        for sub in ("fast", "slow"):
            reg.register(sub, start=StartPosition.EARLIEST, retained={"p-0": [1, 2, 3, 4, 5]})
    fast, slow = Collector(), Collector()
    run_available_now(stream(spark, root, "fast"), str(tmp_path / "cf"), fast)
    assert segment_files(root) == [1, 2, 3, 4, 5], "deleted before 'slow' acked"
    run_available_now(stream(spark, root, "slow", maxSegmentsPerTrigger="1"),
                      str(tmp_path / "cs"), slow)
    # both have acked all five: reclaimed
    assert segment_files(root) == []
    write_segments(root, 3, first_key=50)
    run_available_now(stream(spark, root, "fast"), str(tmp_path / "cf"), fast)
    assert segment_files(root) == [6, 7, 8], "'fast' acked 6-8, 'slow' has not"
    run_available_now(stream(spark, root, "slow", maxSegmentsPerTrigger="1"),
                      str(tmp_path / "cs"), slow)
    assert fast.keys() == slow.keys() == list(range(80))
    assert len(fast.batches) == 2 and len(slow.batches) == 8
    assert registry_hwm(root, "fast") == 8 and registry_hwm(root, "slow") == 8
    assert segment_files(root) == []


class _FailingOnce(Collector):
    """Keeps batch ``fail_at``'s rows, then fails it once: offsets/N logged, commits/N not."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def __call__(self, df, batch_id: int) -> None:
        super().__call__(df, batch_id)
        if batch_id == self.fail_at:
            raise RuntimeError(f"injected failure in batch {batch_id}")


def test_replay_with_offsets_but_no_commit_reads_identical_rows_and_pins_retention(
    spark, tmp_path
):
    """Offsets/N logged, commits/N missing: batch N is replayed from the same offsets."""
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 5)
    first = _FailingOnce(fail_at=2)
    q = (
        stream(spark, root, "t19", maxSegmentsPerTrigger="2").writeStream.foreachBatch(first)
        .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    )
    with pytest.raises(Exception, match="injected failure in batch 2"):
        q.awaitTermination(120)
    assert committed_batches(ckpt) == [0, 1]
    assert checkpoint_offsets(ckpt)[2] == {"p-0": 5}
    assert segment_files(root) == [5], "batch 2's segment is pinned: never acked"
    assert registry_hwm(root, "t19") == 4
    second = Collector()
    run_available_now(stream(spark, root, "t19", maxSegmentsPerTrigger="2"), ckpt, second)
    assert second.calls == [2]
    assert second.batches[2] == first.batches[2]
    assert registry_hwm(root, "t19") == 5  # acked once Spark committed the replay
    assert segment_files(root) == []


def test_starting_positions_latest_and_acked(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 3)
    late = Collector()
    run_available_now(stream(spark, root, "late", startingPosition="latest"),
                      str(tmp_path / "c1"), late)
    assert late.keys() == []
    write_segments(root, 2, first_key=30)
    run_available_now(stream(spark, root, "late"), str(tmp_path / "c1"), late)
    assert late.keys() == list(range(30, 50))
    again = Collector()
    run_available_now(stream(spark, root, "late"), str(tmp_path / "c2"), again)
    # 'late' acked everything it read (Spark planned past its last batch), so a new
    # checkpoint resuming from its acks ('acked' is the default) finds nothing left
    assert again.keys() == []


def test_a_second_live_query_with_the_same_subscriber_fails_clearly(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 2)
    first = (
        stream(spark, root, "dup").writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "c1"))
        .trigger(processingTime="200 milliseconds").start()
    )
    try:
        wait_until(lambda: first.lastProgress is not None, what="first query's progress")
        second = (
            stream(spark, root, "dup").writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "c2"))
            .trigger(processingTime="200 milliseconds").start()
        )
        with pytest.raises(Exception, match="already has a live consumer"):
            second.awaitTermination(60)
        assert first.isActive and first.exception() is None
    finally:
        first.stop()


def test_a_stream_without_subscriber_fails_naming_the_option(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 1)
    with pytest.raises(Exception, match="subscriber"):
        q = (spark.readStream.format("quiver").load(root).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "c")).start())
        q.awaitTermination(60)


def test_data_committed_while_the_writer_is_idle_becomes_visible(spark, tmp_path):
    from quiver_spark import QuiverStore

    from .source_helpers import rows_of

    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 1)
    store = QuiverStore.open(root, partition="p-0", background=False)
    store.append(rows_of(10, 10))
    store.flush()  # durable and acknowledged, but the open segment is never sealed
    assert store.writer is not None
    store.writer.close(finalize=False)  # the writer goes away without sealing
    sink = Collector()
    run_available_now(stream(spark, root, "idle"), ckpt, sink)
    assert sink.keys() == list(range(20))


def test_live_stream_sees_new_segments_within_a_few_triggers(spark, tmp_path):
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 1)
    sink = Collector()
    q = (stream(spark, root, "live").writeStream.foreachBatch(sink)
         .option("checkpointLocation", ckpt).trigger(processingTime="100 milliseconds").start())
    try:
        wait_until(lambda: sink.keys() == list(range(10)), what="first segment")
        write_segments(root, 2, first_key=10)
        t0 = time.monotonic()
        wait_until(lambda: sink.keys() == list(range(30)), what="new segments")
        assert time.monotonic() - t0 < 10
        # acked segments go at the next trigger; the last batch's are acked when Spark
        # plans the batch after it, so [] is as valid an end state as [3] or [2, 3]
        wait_until(lambda: 1 not in segment_files(root), what="retention of acked segments")
        assert set(segment_files(root)) <= {2, 3}
    finally:
        q.stop()
    shutil.rmtree(ckpt)
