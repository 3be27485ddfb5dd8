"""A live consumer on an object root that was paused past its lease (GC, a network
partition) cannot acknowledge once another consumer took the subscriber over: the
newcomer claims the subscriber in the ack log before it reads its position, and an
acknowledgement built after that claim is refused by the log's order (ARCHITECTURE.md
§13.7), so the newcomer never skips a row it did not deliver.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.subscribers.live import LeaseLive, LiveClaim, live_lease_key
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.planning import Caps
from tests.stores import acked_ids, id_batch, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")

ROOT = "memory://claims/s"


def _write(tmp_path: Path, segments: int, rows: int = 3) -> None:
    w = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0", background=False)
    for i in range(segments):
        w.append(id_batch(i * rows, rows))
        w.flush()
        assert w.finalize() is not None
    w.close()


def _taken_over(tmp_path: Path, name: str) -> QuiverStore:
    """A consumer on another host took ``name`` over (its lease, a new token) and
    wrote what it writes to the ack log before it reads its position. Returns that
    host's store."""
    other = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-c2"), partition=None)
    url = other.objects.display(live_lease_key(name))
    other.subscribers.claim_consumer(name, LiveClaim(0xC2C2C2C2, url, 2))
    return other


def test_an_acknowledgement_built_after_a_takeover_is_refused_and_the_newcomer_delivers_it(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 4)
    c1 = Subscription.open(ROOT, "exp", config=wal_in(tmp_path / "wal-c1"))
    c1.start("earliest")
    batch = c1.poll()
    assert batch is not None  # C1 delivers rows 0..11 downstream, then pauses before its ack
    other = _taken_over(tmp_path, "exp")
    # C1 resumes past its own lease check: the ack log itself refuses it
    with (
        mock.patch.object(LeaseLive, "check", lambda *a, **k: None),
        pytest.raises(LeaseLostError, match="another live consumer"),
    ):
        c1.ack(batch.end)
    c2 = Subscription(other, "exp", live=False)  # the newcomer reads from the acked mark
    c2.start()
    assert acked_ids(c2) == list(range(12))  # nothing skipped: C1's ack never landed


def test_an_acknowledgement_ordered_before_the_claim_is_in_the_newcomers_position(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 4)
    c1 = Subscription.open(ROOT, "exp", config=wal_in(tmp_path / "wal-c1"))
    c1.start("earliest")
    first = c1.poll(Caps(max_segments=2))
    assert first is not None
    c1.ack(first.end)  # landed before the takeover
    other = _taken_over(tmp_path, "exp")
    c2 = Subscription(other, "exp", live=False)
    c2.start()
    assert acked_ids(c2) == list(range(6, 12))  # from C1's acknowledged position on


def test_the_same_consumer_acknowledges_freely_across_many_calls(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    c1 = Subscription.open(ROOT, "exp", config=wal_in(tmp_path / "wal-c1"))
    c1.start("earliest")
    assert acked_ids(c1) == list(range(9))
    c1.close()
    again = Subscription.open(ROOT, "exp", config=wal_in(tmp_path / "wal-c1"))
    again.start()
    assert acked_ids(again) == []
    again.close()
