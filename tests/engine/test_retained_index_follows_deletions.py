"""A deletion behind the front of a partition by another process is followed.

When another process deletes a segment that is not the oldest retained one (acks out
of order), a long-lived index drops it too: it is neither deleted again nor counted
as freed bytes or as an eviction a second time.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark.subscribers import Outcome
from tests.stores import writer_and_two_retention_handles


def test_a_deletion_behind_the_front_by_another_process_is_followed(tmp_path: Path) -> None:
    with writer_and_two_retention_handles(tmp_path) as (a, b):
        a.subscribers.record("s", "p-0", [2], Outcome.ACK)  # a gap: 1 is still pending
        assert b.run_retention().deleted == {"p-0": [2]}

        with a.subscribers.exclusive() as reg:  # what a's next pass starts from
            a._retention.index.sync(a.segment_location, reg)
        seen = [s.seq for s in a._retention.index.segments("p-0")]
        assert seen == a.segment_location.published_seqs("p-0") == [1, 3], seen

        result = a.run_retention()
        assert result.deleted == {}, "a pass deleted a segment that was already gone"
        evictions = a.metrics.total("quiver.gc.evictions_total") + b.metrics.total(
            "quiver.gc.evictions_total"
        )
        assert evictions == 1, "one segment evicted, counted twice"
