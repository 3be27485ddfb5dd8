"""A lease has one holder at a time, and a holder that was replaced is fenced.

Two acquirers never both hold a lease; a holder that keeps renewing is never taken
over; one that stops renewing is taken over by an observer that saw the same version
for ``ttl_s`` of its own monotonic clock, with ``epoch + 1``, and the old holder's next
renewal raises :class:`LeaseLostError` (and ``lost()`` stays True). A released lease is
taken at once. Wall clocks play no part: a wildly wrong ``time.time`` changes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import HolderInfo, Lease, current_holder
from quiver_spark.control.lease_keeper import LeaseKeeper
from quiver_spark.errors import LeaseHeldError, LeaseLostError, LockedError
from quiver_spark.objects.memory import MemoryObjects

KEY = "partitions/h-0/LEASE"


class FakeClock:
    """A monotonic clock the test moves; ``sleep`` advances it."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


pytestmark = pytest.mark.usefixtures("fresh_memory")


@contextmanager
def another_process(n: int = 1) -> Iterator[None]:
    """Act as process ``5000 + n`` of another host (its own pid namespace)."""
    ident = lease_mod._Identity(f"host-{n}", 5000 + n, 1, f"node-{n}")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        yield


def foreign_lease(objects: MemoryObjects, *, epoch: int = 1, ttl_s: float = 30.0) -> str:
    """A lease object written by a holder on another host (never dead here)."""
    holder = HolderInfo("other-host", 4242, "f" * 32, "writer", "2020-01-01T00:00:00Z", ttl_s)
    data = lease_mod._encode(epoch, holder, seq=0)
    got = objects.get(KEY)
    if got is None:
        return objects.create(KEY, data)
    return objects.replace(KEY, data, version=got.version)


def test_a_second_acquirer_is_refused_naming_the_holder_and_when_its_lease_expires() -> None:
    objects = MemoryObjects("b1")
    clock = FakeClock()
    first = Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    assert first.epoch == 1
    with pytest.raises(LeaseHeldError) as err:
        Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    assert isinstance(err.value, LockedError)  # existing handlers of a held lock catch it
    msg = str(err.value)
    assert "\n" not in msg and "memory://b1/partitions/h-0/LEASE" in msg
    assert "this process" in msg

    foreign_lease(objects)  # now another host's holder
    with pytest.raises(LeaseHeldError) as err:
        Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    msg = str(err.value)
    assert "pid 4242 on other-host (writer since 2020-01-01T00:00:00Z)" in msg
    assert "its lease expires 30 seconds after its last renewal" in msg


def test_a_successor_after_expiry_gets_the_next_epoch_and_the_old_holder_is_fenced() -> None:
    objects = MemoryObjects("b2")
    clock = FakeClock()
    old = Lease.acquire(objects, KEY, purpose="writer", ttl_s=30, clock=clock, sleep=clock.sleep)
    old.renew()
    # the old holder stalls; another process's acquirer watches with its own clock
    other_clock = FakeClock()
    with another_process():
        with pytest.raises(LeaseHeldError):
            Lease.acquire(
                objects, KEY, purpose="writer", clock=other_clock, sleep=other_clock.sleep
            )
        other_clock.t += 29.9
        with pytest.raises(LeaseHeldError):
            Lease.acquire(
                objects, KEY, purpose="writer", clock=other_clock, sleep=other_clock.sleep
            )
        other_clock.t += 0.1
        new = Lease.acquire(
            objects, KEY, purpose="writer", clock=other_clock, sleep=other_clock.sleep
        )
    assert new.epoch == old.epoch + 1

    with pytest.raises(LeaseLostError) as err:
        old.renew()
    assert old.lost()
    msg = str(err.value)
    assert f"had epoch {old.epoch}" in msg and f"now has epoch {new.epoch}" in msg
    assert err.value.epoch == 1 and err.value.new_epoch == 2
    with pytest.raises(LeaseLostError):  # lost stays lost
        old.renew()
    assert old.lost()
    new.renew()  # the successor goes on undisturbed
    assert not new.lost()
    old.release()  # a fenced holder's release writes nothing
    with another_process():
        new.renew()
    assert new.holder.host == "host-1"


def test_a_waiting_acquirer_takes_over_once_the_lease_stayed_unchanged_for_its_ttl() -> None:
    objects = MemoryObjects("b3")
    foreign_lease(objects, epoch=7, ttl_s=30)
    clock = FakeClock()
    got = Lease.acquire(objects, KEY, purpose="writer", wait_s=60, clock=clock, sleep=clock.sleep)
    assert got.epoch == 8
    assert 30 <= clock.t - 1000.0 < 32  # waited the holder's ttl, polling


def test_a_holder_that_renews_is_never_taken_over() -> None:
    objects = MemoryObjects("b4")
    clock = FakeClock()
    holder = Lease.acquire(objects, KEY, purpose="writer", ttl_s=30, clock=clock, sleep=clock.sleep)
    for _ in range(20):
        with another_process(), pytest.raises(LeaseHeldError):
            Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
        clock.t += 25  # less than the ttl between two renewals, 500 s in all
        holder.renew()
    assert not holder.lost()


def test_an_acquirer_told_to_stop_when_renewed_gives_up_once_it_sees_a_renewal() -> None:
    objects = MemoryObjects("b5")
    clock = FakeClock()
    holder = Lease.acquire(objects, KEY, purpose="reader", clock=clock, sleep=clock.sleep)

    def sleep(s: float) -> None:
        clock.sleep(s)
        holder.renew()

    with another_process(), pytest.raises(LeaseHeldError):
        Lease.acquire(
            objects, KEY, purpose="reader", wait_s=100, stop_when_renewed=True, clock=clock,
            sleep=sleep,
        )  # fmt: skip
    assert clock.t - 1000.0 < 5  # gave up at the first renewal seen, not after 100 s


def test_a_released_lease_is_taken_at_once_with_the_next_epoch() -> None:
    objects = MemoryObjects("b6")
    clock = FakeClock()
    first = Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    first.release()
    second = Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    assert second.epoch == 2
    with pytest.raises(LeaseLostError):
        first.renew()


def test_a_lease_dropped_without_release_in_this_process_is_taken_at_once() -> None:
    objects = MemoryObjects("b7")
    first = Lease.acquire(objects, KEY, purpose="writer")
    del first
    again = Lease.acquire(objects, KEY, purpose="writer")
    assert again.epoch == 2


def test_a_wildly_wrong_wall_clock_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = MemoryObjects("b8")
    foreign_lease(objects, ttl_s=30)
    clock = FakeClock()
    wall = iter([1e12, -5e9, 0.0, 4e9] * 1000)
    monkeypatch.setattr("time.time", lambda: next(wall))
    with pytest.raises(LeaseHeldError):  # a far-future wall clock does not expire it
        Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    clock.t += 29
    with pytest.raises(LeaseHeldError):
        Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    clock.t += 1
    got = Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    assert got.epoch == 2
    got.renew()
    assert not got.lost()


def test_a_deleted_lease_object_fences_its_holder_and_min_epoch_keeps_epochs_rising() -> None:
    objects = MemoryObjects("b9")
    old = Lease.acquire(objects, KEY, purpose="writer", min_epoch=41)
    assert old.epoch == 42
    objects.delete(KEY)
    with pytest.raises(LeaseLostError, match="deleted"):
        old.renew()
    new = Lease.acquire(objects, KEY, purpose="writer", min_epoch=old.epoch)
    assert new.epoch == 43


def test_current_holder_names_a_live_holder_and_none_once_released_or_expired() -> None:
    objects = MemoryObjects("b10")
    clock = FakeClock()
    assert current_holder(objects, KEY, clock=clock) is None
    foreign_lease(objects)
    seen = current_holder(objects, KEY, clock=clock)
    assert seen is not None and seen.pid == 4242
    clock.t += 30
    assert current_holder(objects, KEY, clock=clock) is None  # unchanged for its ttl
    mine = Lease.acquire(objects, KEY, purpose="reader", clock=clock, sleep=clock.sleep)
    assert current_holder(objects, KEY, clock=clock) == mine.holder
    mine.release()
    assert current_holder(objects, KEY, clock=clock) is None


def test_a_keeper_renews_until_released_and_records_a_loss() -> None:
    objects = MemoryObjects("b11")
    lease = Lease.acquire(objects, KEY, purpose="writer")
    losses: list[LeaseLostError] = []
    keeper = LeaseKeeper(lease, on_lost=losses.append)
    v0 = objects.head(KEY)
    assert keeper.tick()
    assert objects.head(KEY) != v0  # a renewal is a new version
    foreign_lease(objects, epoch=5)
    assert not keeper.tick()
    assert keeper.error is not None and losses == [keeper.error] and lease.lost()

    # a background keeper stops when its lease is released
    objects.delete(KEY)
    fresh = Lease.acquire(objects, KEY, purpose="writer", ttl_s=0.03)
    bg = fresh.keep()
    fresh.release()
    assert not bg._thread.is_alive()
    got = objects.get(KEY)
    assert got is not None and lease_mod.decode_lease(KEY, got.data).released


def race(
    objects: MemoryObjects,
    clock: FakeClock,
    barrier: threading.Barrier,
    winners: list[Lease],
    refused: list[BaseException],
) -> None:
    barrier.wait()
    try:
        winners.append(
            Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
        )
    except LockedError as e:
        refused.append(e)


def test_concurrent_acquirers_of_an_expired_lease_have_exactly_one_winner_each_round() -> None:
    objects = MemoryObjects("b12")
    clock = FakeClock()
    # a winner's response comes back late: the others look at its lease meanwhile
    objects.faults.after = lambda op, key: time.sleep(0.005) if op == "replace" else None
    for round_ in range(15):
        foreign_lease(objects, epoch=100 + round_)
        with pytest.raises(LeaseHeldError):  # observed once...
            Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
        clock.t += 30  # ...and unchanged for its ttl: expired for every thread below
        winners: list[Lease] = []
        refused: list[BaseException] = []
        barrier = threading.Barrier(8)
        threads = [
            threading.Thread(target=race, args=(objects, clock, barrier, winners, refused))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(winners) == 1 and len(refused) == 7, (round_, winners, refused)
        assert winners[0].epoch == 101 + round_
        got = objects.get(KEY)
        assert got is not None
        assert lease_mod.decode_lease(KEY, got.data).holder.token == winners[0].holder.token


def test_a_renewal_whose_condition_keeps_failing_gives_up_with_a_lost_race_and_stays_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from quiver_spark.control import cas
    from quiver_spark.errors import LostRaceError, VersionMismatch

    objects = MemoryObjects("b-lost-race")
    clock = FakeClock()
    holder = Lease.acquire(objects, KEY, purpose="writer", ttl_s=30, clock=clock, sleep=clock.sleep)
    monkeypatch.setattr(cas, "pause", lambda n, sleep: None)

    def refused(key: str, data: bytes, *, version: str) -> str:
        raise VersionMismatch(key, "the storage refused the condition")

    monkeypatch.setattr(objects, "replace", refused)
    with pytest.raises(LostRaceError) as caught:
        holder.renew()
    assert caught.value.attempts == cas.ATTEMPTS and caught.value.where == holder.url
    assert "changed under its holder" in str(caught.value)
    assert not holder.lost()  # not taken over: still held, a later renewal may land
    monkeypatch.undo()
    holder.renew()
    assert not holder.lost()
