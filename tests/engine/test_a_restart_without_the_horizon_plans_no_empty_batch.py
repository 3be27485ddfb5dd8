"""A query restarted without its acceptance horizon (ARCHITECTURE.md §19.1: the offset
decides its own batch, the option only future plans) resumes from an offset that holds
the last batch's cutoff. With nothing new to read, its next plan is that offset itself,
byte for byte, so Spark (which compares offsets by their JSON) runs no empty batch; the
next batch with new data is planned without a cutoff."""

from __future__ import annotations

from pathlib import Path

from quiver_spark.spark.offsets import QuiverOffset, offset_json
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import int_segments


def test_a_plan_from_an_offset_with_a_cutoff_that_adds_nothing_returns_it_unchanged(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    int_segments(root, [(0, 3), (3, 3)], partition="p-0")
    with Subscription.open(root, "s", horizon="1h") as sub:
        store_id = sub.store.required_store_id()
        end = sub.next_batch_end(sub.start("earliest"))
        sub.ack(end)
        last = offset_json(end, store_id)
    assert last["v"] == 4 and "cutoff_ns" in last
    with Subscription.open(root, "s") as sub:  # restarted without the horizon
        start = QuiverOffset.from_json(last).position
        assert offset_json(sub.next_batch_end(start), store_id) == last
    int_segments(root, [(6, 3)], partition="p-0")
    with Subscription.open(root, "s") as sub:
        start = QuiverOffset.from_json(last).position
        end = sub.next_batch_end(start)
        assert end.cutoff_ns is None and end.segments == {"p-0": 3}
        assert [m.seq for m in sub.segments(start, end)] == [3]
        assert offset_json(end, store_id) == {"v": 2, "store": store_id, "segments": {"p-0": 3}}
        assert Position.from_json(end.to_json()) == end
