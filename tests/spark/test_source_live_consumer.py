"""A subscriber has one live query at a time, and a restarted query takes it over.

A query stopped and started again from its checkpoint in the same session replaces
its reader and goes on reading; a second query of a subscriber that is being read
fails with the live-consumer lock's one-line message naming the holder, without the
lock's chained OS error or the writer lock's wording.
"""

from __future__ import annotations

from .source_helpers import Collector, stream, wait_until, write_segments


def test_a_query_stopped_and_started_again_in_the_same_session_takes_over_its_subscriber(
    spark, tmp_path
):
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 2)
    seen = Collector()

    def start():
        return (
            stream(spark, root, "again").writeStream.foreachBatch(seen)
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="200 milliseconds").start()
        )  # fmt: skip

    first = start()
    try:
        wait_until(lambda: len(seen.keys()) == 20, what="the first run's rows")
    finally:
        first.stop()
    second = start()  # a new reader for the same query, in the same driver
    try:
        write_segments(root, 2, first_key=20)
        wait_until(lambda: len(seen.keys()) == 40 or not second.isActive, what="new rows")
        assert second.exception() is None, second.exception()
        assert seen.keys() == list(range(40))
    finally:
        second.stop()


def test_a_second_live_query_fails_with_the_live_consumer_lock_message_alone(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 2)
    first = (
        stream(spark, root, "dup").writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "c1"))
        .trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        wait_until(lambda: first.lastProgress is not None, what="first query's progress")
        second = (
            stream(spark, root, "dup").writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "c2"))
            .trigger(processingTime="200 milliseconds").start()
        )  # fmt: skip
        wait_until(lambda: not second.isActive, timeout_s=120, what="the second query to fail")
        text = str(second.exception())
        assert "SubscriberError: subscriber 'dup' already has a live consumer" in text
        assert "live-consumer lock" in text and "since" in text
        assert "BlockingIOError" not in text and "one writer per partition" not in text
        assert "LockedError" not in text
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
