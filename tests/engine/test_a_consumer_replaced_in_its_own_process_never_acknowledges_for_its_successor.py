"""A live consumer whose lease was taken over while it was paused must not acknowledge
once a newer consumer of the same subscriber opened in the same process (a query
restarted in the same driver, a second Subscription of the service): the newcomer
claimed the subscriber in the ack log before it read its position, so an
acknowledgement of the old consumer built after that claim is refused
(ARCHITECTURE.md §14.2 "Consumer claims", §16.2), and the newcomer never skips a row
it did not deliver. The old consumer's lease is lost; it cannot tell its own
acknowledgement from the newcomer's by which object of the process holds the lease.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import live
from quiver_spark.subscription import Subscription
from tests.stores import acked_ids, id_batch, wal_in

ROOT = "memory://twice/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_consumer_whose_lease_moved_never_acknowledges_after_a_newer_consumer_of_its_process_claimed(
    tmp_path: Path,
) -> None:
    objects = MemoryObjects("twice", "s")
    key = live.live_lease_key("fwd")
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal"), partition="p-0", background=False) as w:
        w.append(id_batch(0, 4))
        w.finalize()
    old = Subscription.open(ROOT, "fwd", config=wal_in(tmp_path / "wal-old"))
    old.start("earliest")
    batch = old.poll()
    assert batch is not None  # delivered downstream; the consumer pauses before its ack
    held = live._live[objects.display(key)].lock
    assert isinstance(held, lease_mod.Lease) and held.keeper is not None
    held.keeper.stop()  # paused: no renewal reaches the storage
    # a consumer on another host sees the lease unrenewed for its ttl, takes it over,
    # and is stopped (it releases the lease)
    got = objects.get(key)
    assert got is not None
    body = lease_mod.decode_lease(key, got.data)
    other = lease_mod.HolderInfo("host-c", 9, "c" * 32, "live consumer", "?", 30.0)
    objects.replace(
        key, lease_mod._encode(body.epoch + 1, other, seq=1, released=True), version=got.version
    )
    with pytest.raises(LeaseLostError):
        held.renew()  # the old consumer's keeper resumes and learns the lease moved
    # the subscriber's consumer is opened again in this process: a new lease, a claim
    new = Subscription.open(ROOT, "fwd", config=wal_in(tmp_path / "wal-new"))
    new.start()
    # the old consumer resumes and acknowledges what it delivered before the pause
    with pytest.raises(LeaseLostError):
        old.ack(batch.end)
    assert acked_ids(new) == [0, 1, 2, 3]  # nothing skipped: the old ack never landed
    new.close()
