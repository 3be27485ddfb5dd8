"""A subscriber whose live-consumer lease object ``readers/<subscriber>.lease`` went
missing, or was damaged beyond its epoch, is consumed again by its next consumer
(ARCHITECTURE.md §22, LEASE row: "Missing: the next claimant creates it"; damaged: the
next claimant takes it over once it has seen the same bytes for the ttl; "none
needed: the next holder rewrites it"). The next consumer's lease then starts again at
a low epoch, and its claim in the ack log (§13.7) must still stand against the claims
of consumers that closed long ago: otherwise no consumer of the subscriber can ever
open again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import SubscriberError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers.live import live_lease_key
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.planning import Caps
from tests.stores import acked_ids, id_batch, wal_in

ROOT = "memory://lost-lease/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _bucket() -> MemoryObjects:
    return MemoryObjects("lost-lease", "s")


@pytest.mark.parametrize("lease_object", ["deleted", "damaged"])
def test_the_next_consumer_of_a_subscriber_whose_lease_object_was_lost_consumes_it(
    tmp_path: Path, lease_object: str
) -> None:
    with QuiverStore.open(ROOT, wal_in(tmp_path / "w"), partition="p-0", background=False) as w:
        for lo in range(0, 12, 3):
            w.append(id_batch(lo, 3))
            assert w.finalize() is not None
    config = wal_in(tmp_path / "c", lease_ttl_s=0.3)
    for _ in range(2):  # consumers of the subscriber, one after the other
        with Subscription.open(ROOT, "fwd", config=config) as sub:
            sub.start("earliest")
            batch = sub.poll(Caps(max_segments=1))
            assert batch is not None
            sub.ack(batch.end)
    key = live_lease_key("fwd")
    if lease_object == "deleted":
        _bucket().delete(key)
    else:
        got = _bucket().get(key)
        assert got is not None
        _bucket().replace(key, b"\x00" * len(got.data), version=got.version)
    deadline = time.monotonic() + 5
    while True:  # a damaged lease is taken over once seen unchanged for its ttl
        try:
            sub = Subscription.open(ROOT, "fwd", config=config)
            break
        except SubscriberError as e:
            if "already has a live consumer" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with sub:
        sub.start()
        assert acked_ids(sub) == [6, 7, 8, 9, 10, 11]
