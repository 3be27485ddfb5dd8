"""An acknowledgement past what a partition has published is refused.

ARCHITECTURE.md §13.6: a seq that is neither done nor known raises
UnknownSegmentError naming partition, seq and subscriber, and nothing of the call is
written, so a stale position never pre-acknowledges segments published later.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.errors import QuiverError
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import HAND_SEALED, int_segments


def test_ack_of_unpublished_seqs_never_hides_later_segments(tmp_path: Path) -> None:
    root = str(tmp_path / "q")
    int_segments(root, [(0, 3), (3, 3)])  # seqs 1, 2
    refused = False
    with Subscription.open(root, "a") as sub:
        sub.start()
        try:
            sub.ack(Position({"p-0": 5}))  # seqs 3..5 were never published
        except QuiverError:
            refused = True
    int_segments(root, [(100, 2), (110, 2), (120, 2)])  # seqs 3, 4, 5: new rows

    rows: list[int] = []
    with Subscription.open(root, "a") as sub:
        while (batch := sub.poll()) is not None:
            for meta in batch.segments:
                for rb in sub.read(meta):
                    rows += rb.column(0).to_pylist()
            sub.ack(batch.end)
    with QuiverStore.open(root, HAND_SEALED, partition=None, background=False) as store:
        kept = [m.seq for m in store.segments("p-0")]

    # the whole call is refused (nothing written), so every row is still delivered
    assert refused
    assert rows == [0, 1, 2, 3, 4, 5, 100, 101, 110, 111, 120, 121], (
        f"rows published after the refused ack were not all delivered: got {rows}, "
        f"segments left on disk {kept}"
    )
