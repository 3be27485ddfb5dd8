"""A machine comes back to a partition with its WAL holding a transaction that has a
damaged staged object under its id (ARCHITECTURE.md §10.2). A damaged object says nothing
of whose it is. The commit record naming ``(partition, id)`` vouches for the rows staged
under that id. Those may be this WAL's own rows. They may also be another writer's that
reused the id, for example the retry of the same task on another machine that wrote
other rows (a non-deterministic query). So the returning WAL's transaction stays
pending and unresolved: it is logged ``quiver.staged.held``, the writer's status names
it, STATE keeps it, and it is looked at again at every recovery and every
``RESOLVE_CAP_S`` (one GET).

- Repaired, the object decides as an intact one does. Another writer's is sealed from
  the bucket, exactly once, and the WAL's rows are dropped. The WAL's own is sealed
  from the WAL as before.
- Removed, nothing can ever tie the WAL's rows to the commit record again: they are
  dropped as not committed, whether the writer sees the removal live or at its next
  open.

Never are the returning WAL's rows, which nobody reported, published in place of the
committed ones.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import quiver_spark.partition.rebuild as rebuild_module
import quiver_spark.partition.sealing as sealing_module
from quiver_spark import QuiverStore
from quiver_spark.cli.txns import collect_pending
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.partition.model import RESOLVE_CAP_S
from quiver_spark.staging import staged_key
from tests.engine.test_a_returning_machine_never_takes_another_holders_transaction_id_for_its_own import (
    take_over_and_release,
    unstaged_txn,
)
from tests.lost_machines import APP, lose, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")

BUCKET = ("lost", "s")


class Clock:
    """``time`` for the writer's recovery and sealing, with a monotonic clock the test
    moves."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    for module in (rebuild_module, sealing_module):
        monkeypatch.setattr(module, "time", c)
    return c


def damage(txn_id: int) -> bytes:
    """Flip a byte in the middle of p-0's staged object ``txn_id``; its intact bytes."""
    objects = MemoryObjects(*BUCKET)
    key = staged_key("p-0", txn_id)
    got = objects.get(key)
    assert got is not None
    intact = got.data
    mid = len(intact) // 2
    objects.put(key, intact[:mid] + bytes([intact[mid] ^ 0xFF]) + intact[mid + 1 :])
    return intact


def repair(txn_id: int, intact: bytes) -> None:
    MemoryObjects(*BUCKET).put(staged_key("p-0", txn_id), intact)


def remove(txn_id: int) -> None:
    MemoryObjects(*BUCKET).delete(staged_key("p-0", txn_id))


def reused_by_a_retry_that_wrote_other_rows(tmp_path: Path) -> tuple[int, bytes]:
    """Machine a's task writes rows 0..2 as a transaction it never stages (paused); the
    task's retry on machine b gets the same id, writes rows 100..102, stages them and is
    committed; b is lost with its disk before it seals, and its staged object is
    damaged. Returns the id and the object's intact bytes."""
    a = machine(tmp_path, "a")
    ta = unstaged_txn(a, 1, 0, 3)
    lose(a, None)  # paused or gone, its disk kept
    take_over_and_release()
    b = machine(tmp_path, "b")
    tb = task(b, 1, 100, 3)
    assert tb == ta, "the scenario needs the retry to reuse the id"
    assert b.commit_txn(APP, 1, [("p-0", tb)], rows=3)
    lose(b, tmp_path / "wal-b")
    take_over_and_release()
    return tb, damage(tb)


def published(tmp_path: Path) -> list[int]:
    obs = observer(tmp_path)
    try:
        return scanned_ids(obs)
    finally:
        obs.close()


def held(store: QuiverStore) -> list[int]:
    assert store.writer is not None
    return store.writer.status()["held_txns"]


def test_a_returning_wals_rows_are_not_published_while_the_object_under_their_id_is_damaged(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    txn, _ = reused_by_a_retry_that_wrote_other_rows(tmp_path)
    with caplog.at_level(logging.WARNING, logger="quiver_spark"):
        back = machine(tmp_path, "a")
    assert back.recovery is not None
    assert (back.recovery.pending_txns, back.recovery.discarded_txns) == (1, 0)
    assert back.recovery.held_txns == 1 and held(back) == [txn]
    assert any(
        "quiver.staged.held" in r.getMessage() and f"txn={txn}" in r.getMessage()
        for r in caplog.records
    )
    assert back.writer is not None
    back.writer.write_heartbeat()  # what ``quiver txns list`` shows of it
    [shown] = collect_pending(back)["pending"]
    assert (shown["txn"], shown["decided"], shown["held"]) == (txn, True, True)
    for _ in range(3):  # ticks and a finalize decide nothing while it is damaged
        assert back.writer is not None
        back.writer.maintain()
        clock.now += RESOLVE_CAP_S
    back.finalize()
    assert published(tmp_path) == []
    back.close()  # a close neither: the transaction is still the WAL's, pending

    again = machine(tmp_path, "a")  # every recovery looks at it again
    assert again.recovery is not None and again.recovery.pending_txns == 1
    assert held(again) == [txn]
    again.close()
    assert published(tmp_path) == []
    assert staged() == [txn]  # left for fsck, and for its repair


def test_once_repaired_the_committed_rows_are_sealed_exactly_once_and_the_wals_never(
    tmp_path: Path, clock: Clock
) -> None:
    txn, intact = reused_by_a_retry_that_wrote_other_rows(tmp_path)
    back = machine(tmp_path, "a")
    assert back.writer is not None and held(back) == [txn]
    repair(txn, intact)
    back.writer.maintain()  # not looked at again before RESOLVE_CAP_S
    assert held(back) == [txn] and published(tmp_path) == []
    clock.now += RESOLVE_CAP_S
    back.writer.maintain()
    assert held(back) == [] and back.writer.status()["pending_txns"] == 0
    assert published(tmp_path) == [100, 101, 102]
    back.close()
    assert published(tmp_path) == [100, 101, 102]
    assert staged() == []
    reopened = machine(tmp_path, "a")
    assert reopened.recovery is not None and reopened.recovery.pending_txns == 0
    reopened.close()
    assert published(tmp_path) == [100, 101, 102]


def test_once_repaired_while_its_writer_is_away_the_next_recovery_decides_it(
    tmp_path: Path,
) -> None:
    txn, intact = reused_by_a_retry_that_wrote_other_rows(tmp_path)
    back = machine(tmp_path, "a")
    back.close()
    repair(txn, intact)
    again = machine(tmp_path, "a")
    assert again.recovery is not None
    assert (again.recovery.pending_txns, again.recovery.discarded_txns) == (0, 1)
    again.close()
    assert published(tmp_path) == [100, 101, 102]
    assert staged() == []


@pytest.mark.parametrize("away", [False, True], ids=["seen live", "seen at the next open"])
def test_once_the_object_is_removed_the_wals_rows_are_dropped_as_not_committed(
    tmp_path: Path, clock: Clock, away: bool
) -> None:
    txn, _ = reused_by_a_retry_that_wrote_other_rows(tmp_path)
    back = machine(tmp_path, "a")
    assert held(back) == [txn]
    if away:
        back.close()
        remove(txn)
        back = machine(tmp_path, "a")
        assert back.recovery is not None
        assert (back.recovery.pending_txns, back.recovery.discarded_txns) == (0, 1)
    else:
        remove(txn)
        clock.now += RESOLVE_CAP_S
        assert back.writer is not None
        back.writer.maintain()
    assert held(back) == []
    assert back.writer is not None and back.writer.status()["pending_txns"] == 0
    back.close()
    # the committed rows were in the removed object only: gone with it; the WAL's,
    # which nobody committed, never take their place
    assert published(tmp_path) == []
    reopened = machine(tmp_path, "a")
    assert reopened.recovery is not None and reopened.recovery.pending_txns == 0
    reopened.close()
    assert published(tmp_path) == []


def test_its_own_damaged_object_once_repaired_is_sealed_from_its_wal_once(
    tmp_path: Path, clock: Clock
) -> None:
    """The object may be the WAL's own (staged, committed, then damaged): held all the
    same, then sealed once it reads back as its own."""
    a = machine(tmp_path, "a")
    ta = task(a, 1, 0, 3)
    assert a.commit_txn(APP, 1, [("p-0", ta)], rows=3)
    lose(a, None)
    take_over_and_release()
    intact = damage(ta)
    back = machine(tmp_path, "a")
    assert back.writer is not None and held(back) == [ta]
    back.finalize()
    assert published(tmp_path) == []
    repair(ta, intact)
    clock.now += RESOLVE_CAP_S
    back.writer.maintain()
    assert held(back) == []
    back.finalize()
    assert published(tmp_path) == [0, 1, 2]
    back.close()
    assert published(tmp_path) == [0, 1, 2]
    assert staged() == []


def test_an_intact_object_costs_no_request_after_recovery(tmp_path: Path) -> None:
    """Nothing held: a writer's ticks read no staged object."""
    a = machine(tmp_path, "a")
    ta = task(a, 1, 0, 3)
    assert a.commit_txn(APP, 1, [("p-0", ta)], rows=3)
    lose(a, None)
    take_over_and_release()
    back = machine(tmp_path, "a")
    assert back.writer is not None and held(back) == []
    objects = back.objects
    assert isinstance(objects, MemoryObjects)
    gets: list[str] = []
    objects.faults.before = lambda op, key: (
        gets.append(key) if op == "get" and "/txns/" in key else None
    )
    try:
        back.writer.maintain()
        back.writer.maintain()
    finally:
        objects.faults.before = None
    assert gets == []
    back.close()
    assert published(tmp_path) == [0, 1, 2]
