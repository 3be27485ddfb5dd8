"""Registry decisions on an object root are exactly-once without a lock (§13.7): two
handles (two processes sharing nothing but the bucket) racing for the same delta
number lose no fact, never register a name twice and elect exactly one winner; a
create whose response was lost is counted once; a 409 is retried; an appender stalled
while another handle checkpoints and deletes the deltas below never loses its facts
silently, and a reader idle that long never counts a delta nobody else counts."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from quiver_spark.errors import ObjectConflict, SubscriberError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscribers.objects_journal import (
    DELTA_PREFIX,
    ObjectJournal,
    delta_key,
)

P = "p-0"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _handle(bucket: str, clock: Clock | None = None) -> tuple[SubscriberRegistry, MemoryObjects]:
    """A registry handle with its own connection to the bucket (another process)."""
    m = MemoryObjects(bucket, "store")
    reg = SubscriberRegistry.open(m.url, objects=m, journal=ObjectJournal)
    _journal(reg).sleep = lambda s: None
    if clock is not None:
        _journal(reg).clock = clock
    return reg, m


def _once(op: str, action: Callable[[], None]) -> Callable[[str, str], None]:
    """A fault hook that runs ``action`` the first time ``op`` is called on a delta."""
    fired: list[bool] = []

    def hook(o: str, key: str) -> None:
        if o == op and key.startswith(DELTA_PREFIX) and not fired:
            fired.append(True)
            action()

    return hook


def _journal(r: SubscriberRegistry) -> ObjectJournal:
    assert isinstance(r.journal, ObjectJournal)
    return r.journal


def _fresh(bucket: str) -> SubscriberRegistry:
    return _handle(bucket)[0]


def test_a_name_raced_by_two_processes_has_exactly_one_winner(bucket):
    a, ma = _handle(bucket)
    b, _ = _handle(bucket)
    ma.faults.before = _once("create", lambda: b.register("x"))
    with pytest.raises(SubscriberError, match="already registered"):
        a.register("x")
    fresh = _fresh(bucket)
    assert fresh.subscribers() == ["x"]
    assert [i.key for i in ma.list(DELTA_PREFIX)] == [delta_key(1)]  # one registration
    assert a.subscribers() == ["x"]  # the loser caught up


def test_facts_racing_for_the_same_number_are_all_kept(bucket):
    a, ma = _handle(bucket)
    b, _ = _handle(bucket)
    a.register("s")
    b.refresh()
    ma.faults.before = _once("create", lambda: b.record("s", P, [2], Outcome.ACK))
    a.record("s", P, [1], Outcome.ACK)
    b.refresh()
    for r in (a, b, _fresh(bucket)):
        assert r.hwm("s", P) == 2


def test_a_deletion_decided_before_a_racing_ack_drops_only_what_is_still_undone(bucket):
    a, ma = _handle(bucket)
    b, _ = _handle(bucket)
    a.register("s")
    b.refresh()
    ma.faults.before = _once("create", lambda: b.record("s", P, [1], Outcome.ACK))
    dropped = a.condemn({P: [1, 2]})
    assert dropped == {"s": {P: [2]}}  # decided again on the state with the ack
    fresh = _fresh(bucket)
    assert fresh.deleted_marks(P).highest == 2 and fresh.hwm("s", P) == 2


def test_a_deregistration_racing_a_registration_of_another_name_keeps_both(bucket):
    a, ma = _handle(bucket)
    b, _ = _handle(bucket)
    a.register("old")
    ma.faults.before = _once("create", lambda: b.register("new"))
    a.deregister("old")
    assert _fresh(bucket).subscribers() == ["new"]
    with pytest.raises(SubscriberError, match="unknown subscriber"):
        b.deregister("old")  # b catches up first: already gone


def test_threads_of_two_processes_lose_no_ack_and_register_each_name_once(bucket):
    a, _ = _handle(bucket)
    b, _ = _handle(bucket)
    names = [f"n{i}" for i in range(12)]
    a.register("s")
    wins: list[str] = []
    errors: list[BaseException] = []

    def work(reg: SubscriberRegistry, seqs: range) -> None:
        try:
            for i, seq in enumerate(seqs):
                reg.record("s", P, [seq], Outcome.ACK)
                name = names[i % len(names)]
                try:
                    reg.register(name)
                    wins.append(name)
                except SubscriberError:
                    pass
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [
        threading.Thread(target=work, args=(a, range(1, 80, 2))),
        threading.Thread(target=work, args=(b, range(2, 81, 2))),
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert sorted(wins) == sorted(names)  # each name won exactly once
    fresh = _fresh(bucket)
    assert fresh.hwm("s", P) == 80 and fresh.subscribers() == sorted([*names, "s"])


def _lose_response(times: int) -> Callable[[str, str], None]:
    left = [times]

    def hook(op: str, key: str) -> None:
        if op == "create" and key.startswith(DELTA_PREFIX) and left[0]:
            left[0] -= 1
            raise TimeoutError(f"response for {key} lost")

    return hook


def test_a_registration_whose_response_was_lost_is_committed_exactly_once(bucket):
    a, ma = _handle(bucket)
    ma.faults.after = _lose_response(1)
    a.register("x")  # no "already registered": the token says it was ours
    assert [i.key for i in ma.list(DELTA_PREFIX)] == [delta_key(1)]
    assert _fresh(bucket).subscribers() == ["x"]
    ma.faults.after = _lose_response(1)
    assert a.condemn({P: [1, 2]}) == {"x": {P: [1, 2]}}
    assert len(ma.list(DELTA_PREFIX)) == 2


def test_a_create_that_failed_before_writing_is_written_once_on_retry(bucket):
    a, ma = _handle(bucket)
    a.register("x")
    left = [1]

    def refuse(op: str, key: str) -> None:
        if op == "create" and left[0]:
            left[0] -= 1
            raise TimeoutError("connection reset")

    ma.faults.before = refuse
    a.record("x", P, [1], Outcome.ACK)
    assert len(ma.list(DELTA_PREFIX)) == 2
    assert _fresh(bucket).hwm("x", P) == 1


def test_a_call_that_raised_on_a_lost_response_can_be_retried_whole(bucket):
    a, ma = _handle(bucket)
    a.register("x")
    ma.faults.after = _lose_response(1)
    lists = [0]

    def read_back_fails(op: str, key: str) -> None:
        if op == "list":
            lists[0] += 1
            if lists[0] == 2:  # the read-back after the lost response
                raise TimeoutError("list timed out")

    ma.faults.before = read_back_fails
    with pytest.raises(TimeoutError):
        a.record("x", P, [1], Outcome.ACK)
    assert not a.is_done("x", P, 1)  # nothing of the call applied in memory
    a.record("x", P, [1], Outcome.ACK)  # retried whole
    assert a.hwm("x", P) == 1
    assert len(ma.list(DELTA_PREFIX)) == 2  # it had landed: not written twice


def test_a_409_is_retried_and_written_once(bucket):
    a, ma = _handle(bucket)
    ma.faults.before = _once(
        "create", lambda: (_ for _ in ()).throw(ObjectConflict("k", "409 conditional conflict"))
    )
    a.register("x")
    assert [i.key for i in ma.list(DELTA_PREFIX)] == [delta_key(1)]


def _fill_and_delete(b: SubscriberRegistry, clock: Clock) -> None:
    """Another process registers ``y`` and appends through two checkpoints a horizon
    apart (checkpoints at every 4th delta number), so that it deletes every delta the
    first one covers."""
    _journal(b).checkpoint_deltas = 4
    b.refresh()
    b.register("y")
    seq = 1
    while b.stats()["acklog"]["checkpoint_gen"] == 0:
        b.record("s", P, [seq], Outcome.ACK)
        seq += 1
    clock.t += _journal(b).horizon_s + 1
    first = b.stats()["acklog"]["checkpoint_gen"]
    while b.stats()["acklog"]["checkpoint_gen"] == first:
        b.record("s", P, [seq], Outcome.ACK)
        seq += 1


def test_an_appender_stalled_past_a_checkpoint_and_deletion_writes_its_facts_again(bucket):
    clock = Clock()
    a, ma = _handle(bucket, clock)
    b, mb = _handle(bucket, clock)
    a.register("s")
    a.register("t")
    head = a.stats()["acklog"]["current_gen"]

    def stall() -> None:  # a's create is delayed while b goes on, then lands
        _fill_and_delete(b, clock)
        assert mb.get(delta_key(head + 1)) is None  # the number a will create was deleted

    ma.faults.before = _once("create", stall)
    a.record("t", P, [100], Outcome.ACK)
    assert a.stats()["acklog"]["current_gen"] > b.stats()["acklog"]["checkpoint_gen"]
    assert mb.get(delta_key(head + 1)) is None  # the void delta was removed
    fresh = _fresh(bucket)
    assert fresh.is_done("t", P, 100) and fresh.subscribers() == ["s", "t", "y"]
    b.refresh()
    assert b.is_done("t", P, 100)
    assert fresh.state.digest() == a.state.digest() == b.state.digest()


def test_a_registration_stalled_but_counted_by_a_checkpoint_is_not_written_twice(bucket):
    clock = Clock()
    a, ma = _handle(bucket, clock)
    b, _ = _handle(bucket, clock)
    a.register("s")
    ma.faults.after = _once("create", lambda: _fill_and_delete(b, clock))  # after it landed
    a.register("x")  # must not be refused as "already registered"
    assert _fresh(bucket).subscribers() == ["s", "x", "y"]
    assert a.subscribers() == ["s", "x"]  # its own state: the head it wrote
    a.refresh()
    assert a.subscribers() == ["s", "x", "y"]


def test_a_reader_idle_past_half_the_horizon_never_counts_a_void_delta(bucket):
    clock = Clock()
    a, ma = _handle(bucket, clock)
    b, _ = _handle(bucket, clock)
    c, _ = _handle(bucket, clock)
    a.register("s")
    a.register("t")
    a.record("t", P, [50], Outcome.ACK)  # head 3: b's first checkpoint is at 4
    c.refresh()  # c's cursor: the same head as a's
    stalled: list[bool] = []
    kept: list[str] = []

    def faults(op: str, key: str) -> None:
        if op == "create" and not stalled:  # a's create waits while b goes on
            stalled.append(True)
            _fill_and_delete(b, clock)
        if op == "delete":  # a's best-effort delete of its void delta fails
            kept.append(key)
            raise TimeoutError("delete timed out")

    ma.faults.before = faults
    a.register("x")  # built on head 3: id 3, which b's "y" took in delta 4
    assert kept == [delta_key(4)]  # the void delta is still there, under c's cursor
    c.refresh()
    fresh = _fresh(bucket)
    assert c.state.digest() == fresh.state.digest()
    assert c.subscribers() == ["s", "t", "x", "y"]


def test_an_append_whose_store_spent_its_retry_budget_is_raised_after_one_round(bucket):
    from quiver_spark.errors import RetriesExhausted

    a, ma = _handle(bucket)
    a.register("s")
    creates: list[str] = []

    def storm(op: str, key: str) -> None:
        if op == "create" and key.startswith(DELTA_PREFIX):
            creates.append(key)
            raise RetriesExhausted(key, f"create {key}: still failing after the budget", attempts=3)

    ma.faults.before = storm
    with pytest.raises(RetriesExhausted):
        a.record("s", P, [1], Outcome.ACK)
    assert len(creates) == 1  # the store's budget is spent once, not once per round
    ma.faults.before = None
    a.record("s", P, [1], Outcome.ACK)  # the call can be retried whole
    assert _fresh(bucket).is_done("s", P, 1)
