"""On an object root a subscriber's one live consumer holds the lease
``readers/<subscriber>.lease``.

A second consumer, in this process or another, is refused with the same one line as on
POSIX, naming the lease, its holder and when the lease expires; a consumer that closed
or was dropped hands the subscriber over at once; one that was taken over learns it
(``LeaseLive.check`` raises LeaseLostError). A POSIX root keeps its ``flock``.
"""

from __future__ import annotations

import gc
import os
import socket
from pathlib import Path
from unittest import mock

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import Lease
from quiver_spark.errors import LeaseLostError, SubscriberError
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.root_kind import root_kind
from quiver_spark.subscribers import live


class Consumer:
    """Stands for a Subscription: what the live-consumer lock is held for."""


@pytest.fixture(autouse=True)
def _fresh(fresh_memory: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "LIVE_LEASE_WAIT_MARGIN_S", -lease_mod.DEFAULT_TTL_S)  # never wait


def test_a_second_consumer_in_this_process_is_refused_in_one_line_naming_the_lease() -> None:
    objects = MemoryObjects("bucket", "store")
    first = Consumer()
    live.LeaseLive(objects).claim("fwd", first)
    try:
        with pytest.raises(SubscriberError) as err:
            live.LeaseLive(objects).claim("fwd", Consumer())
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith(
            "subscriber 'fwd' already has a live consumer: its live-consumer lease "
            "memory://bucket/store/readers/fwd.lease is held by "
            f"pid {os.getpid()} on {socket.gethostname()} (live consumer since "
        )
        assert "in this process" in msg and "one live consumer at a time" in msg
        assert live.LeaseLive(objects).is_live("fwd")
    finally:
        live.LeaseLive(objects).release("fwd", first)
    assert not live.LeaseLive(objects).is_live("fwd")


def test_a_consumer_of_another_process_is_refused_naming_it_and_when_its_lease_expires() -> None:
    objects = MemoryObjects("bucket", "store")
    other = lease_mod._Identity("host-b", 777, 1, "node-b")
    with mock.patch.object(lease_mod, "_me", lambda: other):
        theirs = Lease.acquire(objects, live.live_lease_key("fwd"), purpose=live.LIVE_PURPOSE)
    with pytest.raises(SubscriberError) as err:
        live.LeaseLive(objects).claim("fwd", Consumer())
    msg = str(err.value)
    assert "\n" not in msg
    assert "its live-consumer lease memory://bucket/store/readers/fwd.lease is held by " in msg
    assert "pid 777 on host-b (live consumer since " in msg
    assert "its lease expires 30 seconds after its last renewal" in msg
    theirs.release()
    mine = Consumer()
    live.LeaseLive(objects).claim("fwd", mine)  # released: taken at once
    live.LeaseLive(objects).release("fwd", mine)


def test_a_consumer_closed_or_dropped_hands_the_subscriber_over_at_once() -> None:
    objects = MemoryObjects("bucket", "store")
    first = Consumer()
    live.LeaseLive(objects).claim("r", first)
    live.LeaseLive(objects).release("r", first)
    dropped = Consumer()
    live.LeaseLive(objects).claim("r", dropped)
    del dropped
    gc.collect()
    again = Consumer()
    live.LeaseLive(objects).claim("r", again)
    live.LeaseLive(objects).check("r", again)
    live.LeaseLive(objects).release("r", again)


def test_a_consumer_whose_lease_was_taken_over_is_told_so() -> None:
    objects = MemoryObjects("bucket", "store")
    mine = Consumer()
    live.LeaseLive(objects).claim("r", mine)
    key = live.live_lease_key("r")
    got = objects.get(key)
    assert got is not None
    body = lease_mod.decode_lease(key, got.data)
    successor = lease_mod.HolderInfo("host-c", 9, "c" * 32, "live consumer", "?", 30.0)
    objects.replace(key, lease_mod._encode(body.epoch + 1, successor, seq=0), version=got.version)
    held = live._live[objects.display(key)].lock
    assert isinstance(held, Lease) and held.keeper is not None
    held.keeper.tick()  # the background renewal finds the successor
    with pytest.raises(LeaseLostError, match="pid 9 on host-c"):
        live.LeaseLive(objects).check("r", mine)
    live.LeaseLive(objects).release("r", mine)  # a lost lease is not written
    assert lease_mod.decode_lease(key, objects.get(key).data).holder.host == "host-c"  # type: ignore[union-attr]


def test_a_posix_root_keeps_its_flock(tmp_path: Path) -> None:
    root = str(tmp_path)
    locks = root_kind(root).live_locks(root, LocalObjects(root))
    owner = Consumer()
    locks.claim("fwd", owner)
    try:
        assert (tmp_path / "readers" / "fwd.lock").exists()
        assert not (tmp_path / "readers" / "fwd.lease").exists()
        with pytest.raises(SubscriberError, match="its live-consumer lock "):
            locks.claim("fwd", Consumer())
    finally:
        locks.release("fwd", owner)
