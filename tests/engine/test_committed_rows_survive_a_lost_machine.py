"""On an object root no committed row lives only on one machine (ARCHITECTURE.md §10.2).

A write task stages its transaction in the bucket before it reports it; when the
machine that wrote it is lost (its WAL disk gone, its writer lease no longer renewed),
the next observer pass (the driver after a commit, a consumer's planning, ``quiver
gc``) takes the partition's free lease, publishes every committed staged transaction
not sealed yet, exactly once, drops the ones its batch was decided without, and leaves
undecided ones. A writer whose lease is renewed is never sealed for; a writer that
comes back (or a paused one that resumes mid-seal) never publishes a transaction twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import (
    APP,
    Clock,
    dies_at_its_manifest_step,
    lose,
    machine,
    observer,
    seal_after_expiry,
    staged,
    task,
)
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_committed_rows_of_a_lost_machine_are_readable_after_the_next_observer_pass_exactly_once(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    t2 = task(lost, 1, 3, 2)
    assert lost.commit_txn(APP, 1, [("p-0", t1), ("p-0", t2)], rows=5)
    lose(lost, tmp_path / "wal-a")

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert scanned_ids(obs) == []  # only the lost WAL held them
    sealed = seal_after_expiry(obs, clock)
    assert [p for p, _ in sealed] == ["p-0", "p-0"]
    assert scanned_ids(obs) == [0, 1, 2, 3, 4]
    assert staged() == []  # sealed: the staged objects are garbage, removed
    assert obs.finalize_idle_partitions() == []  # the next pass seals nothing again
    assert scanned_ids(obs) == [0, 1, 2, 3, 4]
    m = obs.manifests.read("p-0")
    assert m is not None and m.sealed_txns() == {t1, t2}
    assert {e.sealed_by for e in m.entries} == {m.epoch}


def test_a_lost_machine_is_sealed_for_once_a_real_short_lease_ttl_has_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = machine(tmp_path, "a", lease_ttl_s=0.5)
    t1 = task(lost, 1, 0, 4)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=4)
    lose(lost, tmp_path / "wal-a")

    obs = observer(tmp_path)
    assert obs.finalize_idle_partitions() == []  # held: watched from now on
    assert scanned_ids(obs) == []
    time.sleep(0.6)
    assert [p for p, _ in obs.finalize_idle_partitions()] == ["p-0"]
    assert scanned_ids(obs) == [0, 1, 2, 3]


def test_an_undecided_transaction_is_left_until_its_batch_is_decided(tmp_path: Path) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 7, 0, 3)
    lose(lost, tmp_path / "wal-a")

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert seal_after_expiry(obs, clock) == []
    assert staged() == [t1]  # the driver may still commit it
    assert scanned_ids(obs) == []

    assert obs.commit_txn(APP, 7, [("p-0", t1)], rows=3)
    assert [p for p, _ in obs.finalize_idle_partitions()] == ["p-0"]  # released: at once
    assert scanned_ids(obs) == [0, 1, 2]
    assert staged() == []


def test_a_transaction_its_batch_was_decided_without_is_dropped(tmp_path: Path) -> None:
    lost = machine(tmp_path, "a")
    winner = task(lost, 2, 0, 2)
    retried = task(lost, 2, 100, 2)  # an attempt Spark did not deliver
    assert lost.commit_txn(APP, 2, [("p-0", winner)], rows=2)
    lose(lost, tmp_path / "wal-a")

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1]
    assert retried not in staged() and staged() == []


def test_the_lost_machine_returning_never_duplicates_what_was_sealed_without_it(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert len(seal_after_expiry(obs, clock)) == 1

    back = machine(tmp_path, "a")  # the same WAL: it recovers the committed txn
    assert back.recovery is not None and back.recovery.sealed_elsewhere == 1
    assert back.finalize() is None  # nothing of it is sealed again
    t2 = task(back, 2, 10, 2)
    assert t2 > t1
    assert back.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    back.close()
    assert scanned_ids(obs) == [0, 1, 2, 10, 11]
    assert staged() == []


def test_a_return_between_its_commit_point_and_its_manifest_step_publishes_nothing_twice(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    dies_at_its_manifest_step(lost)  # .arrow, STATE (the commit point), .meta: no manifest step
    lose(lost, None)

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1, 2]

    back = machine(tmp_path, "a")
    assert back.recovery is not None and back.recovery.sealed_elsewhere == 1
    back.close()
    assert scanned_ids(obs) == [0, 1, 2]


def test_a_writer_that_renews_its_lease_is_never_sealed_for(tmp_path: Path) -> None:
    live = machine(tmp_path, "a")
    t1 = task(live, 1, 0, 3)
    assert live.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert live.writer is not None and live.writer.lease is not None

    clock = Clock()
    obs = observer(tmp_path, clock)
    for _ in range(3):  # however long the observer watches, the lease keeps changing
        assert obs.finalize_idle_partitions() == []
        live.writer.lease.renew()
        clock.t += 2 * lease_mod.DEFAULT_TTL_S
    assert obs.finalize_idle_partitions() == []
    assert staged() == [t1] and scanned_ids(obs) == []

    live.close()  # its writer seals from its WAL, then drops the staged object
    assert scanned_ids(obs) == [0, 1, 2]
    assert staged() == []
    assert obs.finalize_idle_partitions() == []
    assert scanned_ids(obs) == [0, 1, 2]


def test_a_paused_writer_that_resumes_mid_seal_is_fenced(tmp_path: Path) -> None:
    zombie = machine(tmp_path, "a")
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None
    zombie.writer.maintain()  # resolved into its open segment, not sealed yet
    lose(zombie, None, process_dies=False)  # paused: no renewal

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert obs.finalize_idle_partitions() == []
    clock.t += lease_mod.DEFAULT_TTL_S
    seen: list[BaseException] = []

    def resume(op: str, key: str) -> None:
        if op == "create" and key.endswith(".arrow") and not seen:
            try:  # the paused process wakes up while the observer publishes
                zombie.finalize()
            except BaseException as e:
                seen.append(e)
            else:
                seen.append(AssertionError("the zombie published"))

    obs_objects = obs.objects
    assert isinstance(obs_objects, MemoryObjects)
    obs_objects.faults.before = resume
    assert len(obs.finalize_idle_partitions()) == 1
    assert len(seen) == 1 and isinstance(seen[0], LeaseLostError)
    assert scanned_ids(obs) == [0, 1, 2]
    assert staged() == []
