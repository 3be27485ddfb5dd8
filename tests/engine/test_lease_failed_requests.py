"""A lease survives failed requests and damaged objects without guessing.

A write whose response was lost (create, take-over, renewal) is resolved by reading
the lease back: our token there means it happened. A 409 conflict is retried. A
renewal that did not happen leaves the lease held (an ``OSError`` to retry, never a
loss). A damaged lease object is held by an unknown holder until it stayed unchanged
for ``ttl_s`` of observation: never taken at once, never a crash.
"""

from __future__ import annotations

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import HolderInfo, Lease
from quiver_spark.errors import LeaseHeldError, LeaseLostError, ObjectConflict
from quiver_spark.objects.memory import MemoryObjects

KEY = "readers/fwd.lease"


class FakeClock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


pytestmark = pytest.mark.usefixtures("fresh_memory")


def fail_once(op: str, exc: BaseException) -> object:
    """A fault hook raising ``exc`` the first time ``op`` runs."""
    fired: list[str] = []

    def hook(o: str, key: str) -> None:
        if o == op and not fired:
            fired.append(key)
            raise exc

    return hook


def stored(objects: MemoryObjects) -> lease_mod.LeaseBody:
    got = objects.get(KEY)
    assert got is not None
    return lease_mod.decode_lease(KEY, got.data)


@pytest.mark.parametrize("op", ["create", "replace"])
def test_an_acquire_whose_response_was_lost_holds_the_lease(op: str) -> None:
    objects = MemoryObjects("f1")
    if op == "replace":  # a released lease is taken over by a replace
        Lease.acquire(objects, KEY, purpose="reader").release()
    objects.faults.after = fail_once(op, TimeoutError("response lost"))  # type: ignore[assignment]
    got = Lease.acquire(objects, KEY, purpose="reader")
    assert stored(objects).holder.token == got.holder.token
    got.renew()  # its version was learned by reading back
    assert not got.lost()


@pytest.mark.parametrize("op", ["create", "replace"])
def test_an_acquire_that_met_a_conflict_is_retried(op: str) -> None:
    objects = MemoryObjects("f2")
    if op == "replace":
        Lease.acquire(objects, KEY, purpose="reader").release()
    objects.faults.before = fail_once(op, ObjectConflict(KEY, "409"))  # type: ignore[assignment]
    got = Lease.acquire(objects, KEY, purpose="reader")
    assert stored(objects).holder.token == got.holder.token


def test_an_acquire_whose_write_failed_outright_holds_nothing_and_a_retry_succeeds() -> None:
    objects = MemoryObjects("f3")
    objects.faults.before = fail_once("create", OSError("disk on fire"))  # type: ignore[assignment]
    with pytest.raises(OSError, match="disk on fire"):
        Lease.acquire(objects, KEY, purpose="reader")
    assert objects.get(KEY) is None
    assert Lease.acquire(objects, KEY, purpose="reader").epoch == 1


def test_a_waiting_acquire_rides_out_a_failing_read() -> None:
    objects = MemoryObjects("f4")
    clock = FakeClock()
    objects.faults.before = fail_once("get", OSError("503 slow down"))  # type: ignore[assignment]
    got = Lease.acquire(objects, KEY, purpose="reader", wait_s=5, clock=clock, sleep=clock.sleep)
    assert got.epoch == 1


def test_a_renewal_whose_response_was_lost_is_a_renewal() -> None:
    objects = MemoryObjects("f5")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    before = objects.head(KEY)
    objects.faults.after = fail_once("replace", TimeoutError("response lost"))  # type: ignore[assignment]
    lease.renew()  # no error: the read-back found our renewal
    assert objects.head(KEY) != before
    objects.faults.after = None
    lease.renew()  # and the next one writes on the version it read back
    assert stored(objects).seq == 2 and not lease.lost()


def test_a_renewal_that_did_not_happen_raises_and_the_lease_stays_held() -> None:
    objects = MemoryObjects("f6")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    objects.faults.before = fail_once("replace", OSError("connection reset"))  # type: ignore[assignment]
    with pytest.raises(OSError, match="connection reset"):
        lease.renew()
    assert not lease.lost()
    lease.renew()
    assert stored(objects).holder.token == lease.holder.token


def test_a_renewal_whose_lost_write_landed_later_is_adopted() -> None:
    objects = MemoryObjects("f7")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    # an earlier renewal's request landed after its holder gave up on it
    late = lease_mod._encode(lease.epoch, lease.holder, seq=1)
    got = objects.get(KEY)
    assert got is not None
    objects.replace(KEY, late, version=got.version)
    lease._seq = 1
    lease.renew()  # VersionMismatch, but the lease is still ours: adopt and write again
    assert stored(objects).seq > 1 and not lease.lost()
    assert stored(objects).holder.token == lease.holder.token


def test_a_renewal_that_met_a_conflict_is_retried() -> None:
    objects = MemoryObjects("f8")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    objects.faults.before = fail_once("replace", ObjectConflict(KEY, "409"))  # type: ignore[assignment]
    lease.renew()
    assert stored(objects).seq >= 1 and not lease.lost()


def test_a_damaged_lease_object_is_held_until_observed_unchanged_for_the_ttl() -> None:
    objects = MemoryObjects("f9")
    holder = HolderInfo("far", 7, "a" * 32, "live consumer", "2021-01-01T00:00:00Z", 30.0)
    raw = bytearray(lease_mod._encode(9, holder, seq=3))
    raw[12] ^= 0xFF  # the stored crc no longer matches
    objects.create(KEY, bytes(raw))
    clock = FakeClock()
    with pytest.raises(LeaseHeldError) as err:
        Lease.acquire(objects, KEY, purpose="reader", ttl_s=30, clock=clock, sleep=clock.sleep)
    msg = str(err.value)
    assert "\n" not in msg
    assert "unknown holder" in msg and "damaged" in msg and "crc mismatch" in msg
    assert "its lease expires 30 seconds after its last renewal of observation" in msg
    clock.t += 29
    with pytest.raises(LeaseHeldError):
        Lease.acquire(objects, KEY, purpose="reader", ttl_s=30, clock=clock, sleep=clock.sleep)
    clock.t += 1
    got = Lease.acquire(objects, KEY, purpose="reader", ttl_s=30, clock=clock, sleep=clock.sleep)
    assert got.epoch == 10  # the epoch the damaged body still shows, plus one


def test_garbage_in_a_lease_object_restarts_no_lower_than_min_epoch() -> None:
    objects = MemoryObjects("f10")
    objects.create(KEY, b"\x00garbage")
    clock = FakeClock()
    with pytest.raises(LeaseHeldError, match="unknown holder"):
        Lease.acquire(objects, KEY, purpose="writer", clock=clock, sleep=clock.sleep)
    clock.t += 30
    got = Lease.acquire(
        objects, KEY, purpose="writer", min_epoch=17, clock=clock, sleep=clock.sleep
    )
    assert got.epoch == 18


def test_a_holder_whose_lease_object_was_damaged_is_fenced() -> None:
    objects = MemoryObjects("f11")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    got = objects.get(KEY)
    assert got is not None
    objects.replace(KEY, got.data[:-1] + bytes([got.data[-1] ^ 1]), version=got.version)
    with pytest.raises(LeaseLostError, match="damaged"):
        lease.renew()
    assert lease.lost()


def test_a_release_that_failed_is_logged_and_the_lease_expires_instead(
    caplog: pytest.LogCaptureFixture,
) -> None:
    objects = MemoryObjects("f12")
    lease = Lease.acquire(objects, KEY, purpose="reader")
    objects.faults.before = fail_once("replace", OSError("network down"))  # type: ignore[assignment]
    lease.release()  # never raises
    assert "quiver.lease.release_failed" in caplog.text and "network down" in caplog.text
    assert not stored(objects).released
