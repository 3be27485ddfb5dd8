"""A live consumer on an object root paused past its lease, whose subscriber was then
removed and registered again (a new subscriber id, started from the earliest retained
segment), must not acknowledge for the new registration (ARCHITECTURE.md §13.7): a
newcomer registers the subscriber, then claims it in the ack log before it reads its
position, and an acknowledgement the paused consumer builds between the two must not
mark the new registration's rows done, or the newcomer skips rows nobody delivered
for it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.subscribers.live import LeaseLive, LiveClaim, live_lease_key
from quiver_spark.subscription import Subscription
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


def test_a_late_acknowledgement_between_a_new_registration_and_its_claim_skips_nothing(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 4)
    c1 = Subscription.open(ROOT, "exp", config=wal_in(tmp_path / "wal-c1"))
    c1.start("earliest")
    batch = c1.poll()
    assert batch is not None  # C1 delivers rows 0..11, then pauses before its ack
    other = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-c2"), partition=None)
    other.subscribers.deregister("exp")  # quiver subscribers remove exp
    # the newcomer on another host (C1's lease taken over) starts the subscriber over:
    # it registers it, then claims it before it reads its position
    newcomer = Subscription(other, "exp", live=False)
    newcomer.start("earliest")
    # C1 resumes just past its own lease check, between the registration and the claim
    with (
        mock.patch.object(LeaseLive, "check", lambda *a, **k: None),
        contextlib.suppress(LeaseLostError),
    ):
        c1.ack(batch.end)
    url = other.objects.display(live_lease_key("exp"))
    other.subscribers.claim_consumer("exp", LiveClaim(0xC2C2C2C2, url, 2))
    assert acked_ids(newcomer) == list(range(12))  # the new registration reads everything
