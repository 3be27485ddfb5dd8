"""A nacked segment is delivered again, and a range ack does not acknowledge it.

``nack`` records that a delivered segment was not processed. Until it is delivered
again (by ``poll`` or ``segments``), ``ack(through)`` passes over it, so the README's
loop (``sub.ack(batch.end)`` after every batch) never acknowledges a segment the
consumer gave back; the next ``poll`` delivers it again, without the segments already
acknowledged beside it, and the ack of that batch acknowledges it. A nack is
durable: a consumer process that starts over delivers it again too.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark.subscription import Caps, Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.stores import int_segments


def test_a_nacked_segment_is_delivered_again_and_a_range_ack_leaves_it_pending(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)])
    with Subscription.open(str(tmp_path), "fwd") as sub:
        batch = sub.poll()
        assert batch is not None and [m.seq for m in batch.segments] == [1, 2, 3]
        sub.nack("p-0", [2])  # forwarding seq 2 failed
        sub.ack(batch.end)  # the loop acknowledges its batch
        assert sub.acked() == Position({"p-0": 1})
        assert sub.registry.nacked("fwd", "p-0") == frozenset({2})
        again = sub.poll()
        assert again is not None and [m.seq for m in again.segments] == [2]  # not 3 again
        sub.ack(again.end)  # delivered again, then acknowledged
        assert sub.acked() == Position({"p-0": 3})
        assert sub.poll() is None


def test_segments_acknowledged_beside_a_nacked_one_are_reclaimed_not_reported_dropped(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)])
    with Subscription.open(str(tmp_path), "fwd") as sub:
        batch = sub.poll()
        assert batch is not None
        sub.nack("p-0", [1])
        sub.ack(batch.end)
        # the only subscriber is done with 2 and 3: retention reclaims them, not 1
        left = sorted(
            int(p.name.split(".")[0]) for p in (tmp_path / "segments" / "p-0").glob("*.meta")
        )
        assert left == [1]
        again = sub.poll()
        assert again is not None and [m.seq for m in again.segments] == [1]
        assert sub.lost.report()["dropped"] == 0  # 2 and 3 were acknowledged, not dropped


def test_a_nack_outlives_the_consumer_process(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)])
    code = """
        from quiver_spark.subscription import Caps, Subscription
        with Subscription.open(root, "fwd") as sub:
            batch = sub.poll()
            print([m.seq for m in batch.segments])
            if first:
                sub.nack("p-0", [1])
                sub.ack(batch.end)  # acknowledges 2 only
        """
    out = run_python(code, capture=True, root=str(tmp_path), first=True)
    assert out.stdout.strip() == "[1, 2]"
    out = run_python(code, capture=True, root=str(tmp_path), first=False)
    assert out.stdout.strip() == "[1]"


def test_an_ack_without_a_nack_still_acknowledges_the_whole_range(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        sub.start()
        assert sub.ack(Position({"p-0": 2})) == 2
        assert sub.acked() == Position({"p-0": 2})
        assert sub.poll(Caps(max_segments=1)) is None
