"""On an object root, expiring a subscriber never races a start or an acknowledgement.

There is no lock between processes on an object root (§13.7): a retention pass
expiring subscriber X and another process starting or acknowledging for X meet only
in the objects. The deregistration is one ack-log transaction whose build checks,
against the newest ack log, X's record and its live-consumer lease, that X is still
registered, idle and not live; the tombstone is written before it, and a start reads
its record after taking its lease. So either the start sees the tombstone and is
refused, or the pass sees the start (or the acknowledgement) and leaves X registered:
a subscriber is never deregistered under a consumer that started or acknowledged,
and never starts over silently.

The two processes are two handles on one ``memory://`` bucket; the pass's handle runs
the other's call from inside its own requests (the object store's fault hooks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.errors import SubscriberError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.storage_time import time_passes
from tests.stores import int_segments, wal_in

URL = "memory://bkt/s"
AFTER_S = 60.0
LATER_S = 10**4  # far past subscriber.expire_after, by the storage's clock


pytestmark = pytest.mark.usefixtures("fresh_memory")


def config(tmp_path: Path, name: str) -> StoreConfig:
    return wal_in(tmp_path / name)


def handle(tmp_path: Path, name: str) -> QuiverStore:
    return QuiverStore.open(
        URL, config(tmp_path, name), partition=None, create=False, background=False
    )


@pytest.fixture
def idle_x(tmp_path: Path) -> Iterator[tuple[QuiverStore, QuiverStore]]:
    """Two segments; X registered, acknowledged the first, and not running; the pass's
    handle and the other process's handle."""
    int_segments(URL, [(0, 1), (1, 1)], config=config(tmp_path, "w"))
    with Subscription(handle(tmp_path, "x0"), "x", owns_store=True) as sub:
        sub.start("earliest")
        sub.ack(Position({"p-0": 1}))
    time_passes(URL, LATER_S)
    pass_, other = handle(tmp_path, "gc"), handle(tmp_path, "other")
    try:
        yield pass_, other
    finally:
        other.close()
        pass_.close()


def once(
    store: QuiverStore, when: Callable[[str, str], bool], run: Callable[[], None]
) -> list[bool]:
    """Run ``run`` the first time ``store``'s objects are about to do an op ``when`` picks."""
    objects = store.objects
    assert isinstance(objects, MemoryObjects)
    fired: list[bool] = []

    def before(op: str, key: str) -> None:
        if not fired and when(op, key):
            fired.append(True)
            run()

    objects.faults.before = before
    return fired


def expire(store: QuiverStore) -> list[str]:
    return store._retention.expiry.expire_idle(store.subscribers, AFTER_S, time.time_ns())


def registered(store: QuiverStore) -> list[str]:
    store.subscribers.refresh()
    return store.subscribers.subscribers()


def test_a_live_consumer_on_an_object_root_is_never_expired(
    idle_x: tuple[QuiverStore, QuiverStore],
) -> None:
    pass_, other = idle_x
    with Subscription(other, "x") as live:
        live.start()
        assert expire(pass_) == []
        assert registered(pass_) == ["x"]
        assert live.ack(live.next_batch_end(live.start())) == 1


def test_a_start_while_the_pass_writes_its_tombstone_keeps_the_subscriber(
    idle_x: tuple[QuiverStore, QuiverStore],
) -> None:
    pass_, other = idle_x
    started: list[Subscription] = []

    def start() -> None:
        sub = Subscription(other, "x")
        sub.start()
        started.append(sub)

    fired = once(pass_, lambda op, key: key == records.record_key("x") and op != "get", start)
    try:
        assert expire(pass_) == []
        assert fired and started
        assert registered(pass_) == ["x"]
        rec = records.read_record(other.objects, "x")
        assert rec is not None and rec.expired_ns is None  # the tombstone was taken back
        assert started[0].ack(started[0].next_batch_end(started[0].start())) == 1
    finally:
        for sub in started:
            sub.close()


def test_a_start_just_before_the_deregistration_is_refused_as_expired(
    idle_x: tuple[QuiverStore, QuiverStore],
) -> None:
    pass_, other = idle_x
    outcome: list[BaseException | Subscription] = []

    def start() -> None:
        sub = Subscription(other, "x")
        try:
            sub.start()
        except SubscriberError as e:
            sub.close()
            outcome.append(e)
        else:
            outcome.append(sub)

    fired = once(
        pass_, lambda op, key: op == "create" and key.startswith("subscribers/log/"), start
    )
    try:
        assert expire(pass_) == ["x"]
        assert fired and outcome
        assert isinstance(outcome[0], SubscriberError), "started under a deregistration"
        assert "expired" in str(outcome[0])
        assert registered(pass_) == []
    finally:
        for got in outcome:
            if isinstance(got, Subscription):
                got.close()


def test_an_acknowledgement_just_before_the_deregistration_keeps_the_subscriber(
    idle_x: tuple[QuiverStore, QuiverStore],
) -> None:
    pass_, other = idle_x
    acked: list[int] = []

    def ack() -> None:
        with Subscription(other, "x", live=False) as sub:
            acked.append(sub.ack(sub.next_batch_end(sub.acked())))

    fired = once(pass_, lambda op, key: op == "create" and key.startswith("subscribers/log/"), ack)
    assert expire(pass_) == []
    assert fired and acked == [1]
    assert registered(pass_) == ["x"]
    rec = records.read_record(other.objects, "x")
    assert rec is not None and rec.expired_ns is None
