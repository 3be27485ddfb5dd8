"""A read task of a query reading newest first (``catchUpOrder=newest``) that fails
after it read rows of the backlog is retried by Spark (``local[2,3]``: up to three
attempts): every row is delivered once (the failed attempt's rows are discarded, the
retry reads its segments again), and the ack log records each segment once, when
Spark committed its batch (ARCHITECTURE.md §19)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from quiver_spark import layout
from quiver_spark.subscribers import log as acklog

from .source_helpers import Collector, run_available_now, stream, write_segments
from .test_a_newest_first_query_delivers_every_row_once import raw_offsets

SEGMENTS = 8  # seqs 1..8 of 10 rows: keys 0..79
BACKLOG_KEYS = 50  # the first batch takes the newest 3 (keys 50..79); the rest is backlog
AFTER_ROWS = 3


def _fail_once_in_the_backfill(marker: str) -> Any:
    """A UDF whose first attempt of a task reading backlog rows raises after it let
    ``AFTER_ROWS`` of them through (once: the task that creates ``marker`` raises)."""
    from pyspark.sql.functions import udf

    seen = [0]

    def tag(k: int) -> int:
        import os

        from pyspark import TaskContext

        if k < BACKLOG_KEYS and TaskContext.get().attemptNumber() == 0:
            seen[0] += 1
            if seen[0] > AFTER_ROWS:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return k
                os.write(fd, str(seen[0] - 1).encode())
                os.close(fd)
                raise RuntimeError(f"injected failure after {seen[0] - 1} backlog rows")
        return k

    return udf(tag, "long", useArrow=False)


def _acked_seqs(root: str) -> Counter[int]:
    """How often the ack log records each seq done (a single subscriber, p-0)."""
    directory = os.path.join(root, layout.subscribers_dir())
    counts: Counter[int] = Counter()
    for name in sorted(os.listdir(directory)):
        if acklog.parse_log_gen(name) is None:
            continue
        with open(os.path.join(directory, name), "rb") as f:
            _, records, skipped = acklog.read_whole(name, f.read())
        assert not skipped
        for group in acklog.decode_records(records).done:
            for first, n in zip(group.firsts, group.counts or [1] * len(group.firsts), strict=True):
                counts.update(range(first, first + n))
    return counts


def test_a_read_task_failing_mid_backfill_is_retried_and_every_row_is_delivered_once(
    spark, tmp_path
):
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    marker = str(tmp_path / "failed-once")
    write_segments(root, SEGMENTS)
    df = stream(spark, root, "k", catchUpOrder="newest", maxSegmentsPerTrigger="3")
    df = df.select(_fail_once_in_the_backfill(marker)("k").alias("k"), "v")
    sink = Collector()
    run_available_now(df, ckpt, sink)

    with open(marker) as f:
        assert int(f.read()) == AFTER_ROWS, "the failed attempt read no backlog rows"
    keys = sink.keys()
    assert keys == list(range(SEGMENTS * 10)), Counter(keys).most_common(3)
    assert all(v == f"value-{k}" for rows in sink.batches.values() for k, v in rows)
    # newest first: the newest three segments, then the backlog walked down
    assert [r[0] for r in sink.batches[0]] == list(range(BACKLOG_KEYS, SEGMENTS * 10))
    offsets = raw_offsets(ckpt)
    assert offsets[0]["v"] == 3 and offsets[0]["segments"] == {"p-0": SEGMENTS}
    assert offsets[0]["backlog"] == {"p-0": [1, 5]}
    assert offsets[1]["backlog"] == {"p-0": [1, 2]} and "backlog" not in offsets[2]
    assert sorted(sink.batches) == [0, 1, 2]
    # each segment acknowledged once, the retried batch's too
    assert _acked_seqs(root) == Counter(range(1, SEGMENTS + 1))
