"""A machine suspended mid-request (a hibernated or paused VM) resumes with its
monotonic clock where it stopped. Every safety interval a holder or an ack-log
appender measures counts the suspended time (``CLOCK_BOOTTIME``, ARCHITECTURE.md
§8.2, §13.7): a holder resumed past its ttl renews before it acts, and an appender
resumed past half the horizon checks the CHECKPOINT before it reports success.
"""

from __future__ import annotations

import time

import pytest

from quiver_spark.control import clock as clock_mod
from quiver_spark.control.lease import Lease
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.engine.test_registry_on_objects_races import (
    Clock,
    P,
    _fill_and_delete,
    _fresh,
    _handle,
    _journal,
    _once,
)


def _suspend(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """From now on the machine has been suspended for ``seconds``: its boot-time clock
    counts them, its monotonic clock does not."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        pytest.skip("CLOCK_BOOTTIME is Linux's: elsewhere the monotonic clock is used")
    real = time.clock_gettime

    def later(which: int) -> float:
        return real(which) + (seconds if which == boottime else 0.0)

    monkeypatch.setattr(time, "clock_gettime", later)


def test_the_clock_of_holders_and_appenders_counts_a_suspend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before_mono, before = time.monotonic(), clock_mod.elapsed()
    _suspend(monkeypatch, 3600.0)
    assert clock_mod.elapsed() - before >= 3600.0
    assert time.monotonic() - before_mono < 60.0  # the clock a suspend would have stopped


def test_a_lease_holder_resumed_after_its_ttl_has_no_time_left(
    fresh_memory: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = MemoryObjects("suspend", "s")
    lease = Lease.acquire(objects, "readers/x.lease", purpose="live consumer", ttl_s=30.0)
    assert lease.remaining() > 25.0
    _suspend(monkeypatch, 31.0)
    assert lease.remaining() < 0  # it must renew (and learn of a takeover) before it acts


def test_an_appender_suspended_past_a_checkpoint_and_deletion_writes_its_facts_again(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleter_clock = Clock()
    a, ma = _handle(bucket)  # its own clock: the real one
    b, _ = _handle(bucket, deleter_clock)
    a.register("s")
    a.register("t")

    def suspended() -> None:  # a's machine sleeps while b deletes what a read as head
        _fill_and_delete(b, deleter_clock)
        _suspend(monkeypatch, _journal(a).horizon_s)

    ma.faults.before = _once("create", suspended)
    a.record("t", P, [100], Outcome.ACK)
    fresh = _fresh(bucket)
    assert fresh.is_done("t", P, 100)  # the acknowledgement is there for everyone
    assert fresh.state.digest() == a.state.digest()
