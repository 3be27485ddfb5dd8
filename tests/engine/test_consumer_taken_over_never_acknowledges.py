"""A live consumer whose lease another consumer took over acknowledges nothing.

On an object root a subscriber's one live consumer holds ``readers/<sub>.lease``
(ARCHITECTURE.md §8.2). A consumer whose renewals could not reach the storage (a
network partition, a paused process) for longer than the lease's ttl may have been
replaced: an observer that saw the lease unchanged that long takes it over. When the
old consumer comes back, its next ``ack`` must not be recorded: it raises
:class:`LeaseLostError`, whether or not its background renewal has run since.
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
from tests.stores import id_batch, wal_in

ROOT = "memory://cb/s"


pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_consumer_replaced_while_it_was_paused_cannot_acknowledge_when_it_resumes(
    tmp_path: Path,
) -> None:
    objects = MemoryObjects("cb", "s")
    key = live.live_lease_key("fwd")
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal"), partition="p-0", background=False) as w:
        sub = Subscription(QuiverStore.open(ROOT, wal_in(tmp_path / "wal"), partition=None),
                           "fwd", owns_store=True)  # fmt: skip
        try:
            sub.start("earliest")
            w.append(id_batch(0, 4))
            w.finalize()
            batch = sub.poll()
            assert batch is not None
            held = live._live[objects.display(key)].lock
            assert isinstance(held, lease_mod.Lease) and held.keeper is not None
            held.keeper.stop()  # the process pauses: no renewal reaches the storage
            paused_at = held._clock()
            held._clock = lambda: paused_at + 31.0  # ... for longer than the lease's ttl

            # another consumer, having seen the lease unchanged for its ttl, takes it
            got = objects.get(key)
            assert got is not None
            body = lease_mod.decode_lease(key, got.data)
            other = lease_mod.HolderInfo("host-c", 9, "c" * 32, "live consumer", "?", 30.0)
            objects.replace(key, lease_mod._encode(body.epoch + 1, other, seq=0),
                            version=got.version)  # fmt: skip

            before = sub.registry.hwm("fwd", "p-0")
            with pytest.raises(LeaseLostError):
                sub.ack(batch.end)
            sub.registry.refresh()
            assert sub.registry.hwm("fwd", "p-0") == before
        finally:
            sub.close()
