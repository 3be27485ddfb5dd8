"""Newest first, a batch whose caps admit one segment (``maxSegmentsPerTrigger=1``, or a
``maxBytesPerTrigger`` below two segments) still drains the backlog while a writer adds
a segment before every trigger: the backfill gets its turns (about ``1 - head_share``
of those triggers) instead of the head taking every batch, and the head keeps
serving the new segments in the others (ARCHITECTURE.md §19)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark.subscription import Caps, Subscription
from tests.engine.test_newest_first_catch_up_delivers_every_row_once import Writers


def _progress(tmp_path: Path, share: float, caps_of: Callable[[int], Caps]) -> tuple[int, int, int]:
    """After a first batch over 6 segments (the head at 6, the backlog 1..5) and 20
    more triggers with a new segment before each: the seq through which everything
    was served (the backlog's ``lo - 1``, the subscriber's mark), the head's seq, and
    how many of the 20 batches read only backlog segments."""
    root = str(tmp_path)
    writers = Writers(root, ("p-0",))
    try:
        for _ in range(6):
            writers.segment("p-0")
        with Subscription.open(root, "s", order="newest", head_share=share) as sub:
            sub.start()
            meta = sub.meta("p-0", 1)
            assert meta is not None
            caps = caps_of(meta.size_bytes)
            batch = sub.poll(caps)
            assert batch is not None
            sub.ack(batch.end)
            assert sub._resumed().backlog == {"p-0": (1, 5)}
            backfills = 0
            for _ in range(20):  # one new segment per trigger: a steady writer
                writers.segment("p-0")
                head = sub._resumed().get("p-0")
                batch = sub.poll(caps)
                assert batch is not None
                backfills += all(meta.seq < head for meta in batch.segments)
                sub.ack(batch.end)
            resumed = sub._resumed()
        return resumed.low("p-0"), resumed.get("p-0"), backfills
    finally:
        writers.close()


@pytest.mark.parametrize("share", [0.01, 0.75])
def test_one_segment_per_trigger_still_drains_the_backlog(tmp_path: Path, share: float) -> None:
    served, head, backfills = _progress(tmp_path, share, lambda size: Caps(max_segments=1))
    assert served >= 5, f"the backlog 1..5 is served only through {served} after 20 triggers"
    assert head > 6, "the head served none of the new segments"
    # about 1 - share of the batches (a batch where a backlog closed goes to the head)
    assert 20 * (1 - share) - 3 <= backfills <= 20 * (1 - share), backfills


def test_a_byte_cap_below_two_segments_still_drains_the_backlog(tmp_path: Path) -> None:
    served, head, backfills = _progress(tmp_path, 0.5, lambda size: Caps(max_bytes=int(size * 1.5)))
    assert served >= 5, f"the backlog 1..5 is served only through {served} after 20 triggers"
    assert head > 6, "the head served none of the new segments"
    assert 7 <= backfills <= 10, backfills
