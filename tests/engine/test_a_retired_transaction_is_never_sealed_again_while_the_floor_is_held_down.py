"""A writer's ``txn_floor`` never rises above a transaction still open (ARCHITECTURE.md
§10.2): another writer's staged object left undecided (a query stopped mid-batch and
never rerun), a damaged committed staged object, or a transaction its own WAL holds on a
damaged object. ``txns_gone`` names only the newest ``TXNS_GONE_KEEP`` retired ids. So
the writer also records ``txn_high`` and ``txns_open``: every id at or below the high
that is not open is sealed or decided against.

A machine returning with an old WAL that holds a committed transaction, which another
holder sealed from the bucket and retention retired after subscribers read and acked
it, finds it retired by the high long after ``txns_gone`` forgot it, and never publishes
its rows again. The open transaction's staged object is never taken for garbage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import quiver_spark.control.manifest as manifest_mod
from quiver_spark.control.manifest import Manifest
from quiver_spark.control.txn_retirement import TxnRetirement
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.partition.model import RESOLVE_CAP_S
from quiver_spark.subscribers import Outcome
from tests.engine.test_a_damaged_staged_object_under_a_pending_transactions_id_keeps_it_pending import (
    Clock,
    clock,
    damage,
    held,
    published,
    reused_by_a_retry_that_wrote_other_rows,
)
from tests.engine.test_a_returning_machine_never_takes_another_holders_transaction_id_for_its_own import (
    take_over_and_release,
)
from tests.lost_machines import APP, lose, machine, observer, staged, task
from tests.stores import id_batch

pytestmark = pytest.mark.usefixtures("fresh_memory")
__all__ = ["clock"]


def manifest() -> Manifest:
    got = MemoryObjects("lost", "s").get("partitions/p-0/MANIFEST")
    assert got is not None
    return Manifest.decode("MANIFEST", got.data)


def read_acked_and_retired(tmp_path: Path) -> list[int]:
    """A subscriber reads and acks every segment of p-0, retention deletes them all;
    the rows it read."""
    read = published(tmp_path)
    obs = observer(tmp_path)
    try:
        obs.subscribers.register("s")
        obs.subscribers.record("s", "p-0", [m.seq for m in obs.segments("p-0")], Outcome.ACK)
        obs.run_retention()
        assert obs.segments("p-0") == []
    finally:
        obs.close()
    return read


def a_paused_machine_commits(tmp_path: Path, name: str, version: int) -> int:
    """Machine ``name`` stages and commits rows 0..2 as a transaction, then is paused,
    its disk kept, before it seals; the lease is taken over. Returns the id."""
    m = machine(tmp_path, name)
    m.writer.maintain()
    x = task(m, version, 0, 3)
    assert m.commit_txn(APP, version, [("p-0", x)], rows=3)
    lose(m, None)
    take_over_and_release()
    return x


def comes_back(tmp_path: Path, name: str) -> None:
    back = machine(tmp_path, name)
    back.writer.maintain()
    back.finalize()
    back.close()


@pytest.mark.parametrize("stuck", ["damaged", "undecided"])
def test_a_returning_wal_never_publishes_rows_retired_past_txns_gone_while_a_foreign_txn_is_open(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, stuck: str
) -> None:
    monkeypatch.setattr(manifest_mod, "TXNS_GONE_KEEP", 3)
    b = machine(tmp_path, "b")
    if stuck == "undecided":  # a query stopped mid-batch, never rerun: never decided
        tb = b.begin_txn("stopped-query", 1)
        b.append(id_batch(900, 3), txn_id=tb)
        b.flush()
        assert b.stage_txn(tb) > 0
    else:  # committed, then its object damaged: held for fsck, never floored
        tb = task(b, 1, 900, 3)
        assert b.commit_txn(APP, 1, [("p-0", tb)], rows=3)
    lose(b, tmp_path / "wal-b")
    take_over_and_release()
    if stuck == "damaged":
        damage(tb)
    x = a_paused_machine_commits(tmp_path, "a", 2)
    c = machine(tmp_path, "c")  # seals x from the bucket; tb holds its floor down
    c.writer.maintain()
    c.finalize()
    for v in range(3, 10):  # more retired transactions than txns_gone keeps
        t = task(c, v, v * 100, 1)
        assert c.commit_txn(APP, v, [("p-0", t)], rows=1)
        c.writer.maintain()
        c.finalize()
        clock.now += RESOLVE_CAP_S
        c.writer.maintain()
    c.close()
    assert sorted(read_acked_and_retired(tmp_path)) == [0, 1, 2, *(v * 100 for v in range(3, 10))]
    m = manifest()
    assert m.txn_floor < tb < x and x not in m.txns_gone
    assert m.retired(x) and not m.retired(tb) and tb in m.txns_open

    comes_back(tmp_path, "a")

    assert published(tmp_path) == []
    assert tb in staged(), "the open transaction's staged object is kept"


def test_a_returning_wal_never_publishes_rows_retired_past_txns_gone_while_its_holder_holds_one(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest_mod, "TXNS_GONE_KEEP", 3)
    txn, _ = reused_by_a_retry_that_wrote_other_rows(tmp_path)  # committed, damaged
    x = a_paused_machine_commits(tmp_path, "d", 5)
    back = machine(tmp_path, "a")  # holds txn; seals x from the bucket
    assert held(back) == [txn]
    back.writer.maintain()
    back.finalize()
    for v in range(6, 12):
        t = task(back, v, v * 1000, 1)
        assert back.commit_txn(APP, v, [("p-0", t)], rows=1)
        back.writer.maintain()
        back.finalize()
    back.close()
    assert sorted(read_acked_and_retired(tmp_path)) == [0, 1, 2, *(v * 1000 for v in range(6, 12))]
    m = manifest()
    assert m.txn_floor < txn < x and x not in m.txns_gone and m.retired(x)

    comes_back(tmp_path, "d")

    assert published(tmp_path) == []
    assert txn in staged()


def test_at_the_real_txns_gone_limit_a_returning_wal_never_publishes_rows_retired(
    tmp_path: Path, clock: Clock
) -> None:
    b = machine(tmp_path, "b")
    tb = b.begin_txn("stopped-query", 1)
    b.append(id_batch(900_000, 3), txn_id=tb)
    b.flush()
    assert b.stage_txn(tb) > 0
    lose(b, tmp_path / "wal-b")
    take_over_and_release()
    x = a_paused_machine_commits(tmp_path, "a", 2)
    c = machine(tmp_path, "c")
    c.writer.maintain()
    c.finalize()
    for v in range(3, 3 + manifest_mod.TXNS_GONE_KEEP + 2):
        t = task(c, v, 100 + v, 1)
        assert c.commit_txn(APP, v, [("p-0", t)], rows=1)
    c.writer.maintain()
    c.finalize()
    c.close()
    assert len(read_acked_and_retired(tmp_path)) == 3 + manifest_mod.TXNS_GONE_KEEP + 2
    assert x not in manifest().txns_gone

    comes_back(tmp_path, "a")

    assert published(tmp_path) == []


# -- the MANIFEST keys --------------------------------------------------------------------


def test_what_either_copy_retires_stays_retired_when_they_are_joined() -> None:
    m = Manifest("p", txn_floor=10, txn_high=20, txns_open=(12, 15))
    # a writer that still sees 12 open but knows 15 decided, and went higher
    later = m.with_retirement(TxnRetirement(11, 30, frozenset({12, 25})))
    assert (later.txn_floor, later.txn_high, later.txns_open) == (11, 30, (12, 25))
    # a lagging writer (a lower high, 15 still open to it) reopens nothing
    stale = later.with_retirement(TxnRetirement(10, 18, frozenset({12, 15, 16})))
    assert stale == later
    # a floor alone (nothing above it) retires what is below it
    plain = later.with_retirement(TxnRetirement(20))
    assert (plain.txn_floor, plain.txn_high, plain.txns_open) == (20, 30, (25,))
    assert plain.with_retirement(TxnRetirement(30)).txn_high == 0
    assert [t for t in range(1, 35) if not plain.retired(t)] == [25, 31, 32, 33, 34]
    # GONE's copy joins the same way
    joined = Manifest("p", txn_floor=5).with_facts(m.facts())
    assert (joined.txn_floor, joined.txn_high, joined.txns_open) == (10, 20, (12, 15))


def test_the_new_keys_round_trip_and_are_absent_while_unused() -> None:
    m = Manifest("p", txn_floor=10, txn_high=20, txns_open=(12, 15))
    assert Manifest.decode("M", m.encode()) == m
    bare = Manifest("p", txn_floor=10)
    assert b"txn_high" not in bare.encode() and b"txns_open" not in bare.encode()
    assert bare.with_retirement(TxnRetirement(10)) is bare
    assert (
        bare.with_retirement(TxnRetirement(12, 12)).encode() == Manifest("p", txn_floor=12).encode()
    )
