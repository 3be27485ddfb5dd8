"""A machine that comes back to a partition another machine wrote meanwhile never takes
that machine's transaction for one of its own WAL's (ARCHITECTURE.md §10.2).

Transaction ids are WAL record seqs. A writer's ids start above every id its MANIFEST
or a staged object names, but a transaction that was only ever in a lost (or paused)
machine's WAL, never staged and so never reported, names nothing in the bucket: the
partition's next writer, on another machine, may give the same id to a transaction
of its own, of the same batch even (a Spark task retried there). When the first
machine comes back to the partition with its WAL while the other's transaction is
committed and staged but not sealed yet (the other machine was lost too), the commit
record naming ``(partition, id)`` speaks of the staged object's rows, never of the
returning WAL's: those are dropped and the staged object's rows sealed, exactly once.
With slots a pool of leases (§8.2), a machine coming back to a slot others wrote is
the common case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.layout import writer_lease as writer_lease_key
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, Clock, lose, machine, observer, staged, task
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def take_over_and_release() -> None:
    """An observer watches p-0's writer lease unrenewed for its ttl, takes it and lets
    it go (as a sealing pass or a slot claimant does)."""
    objects, clock = MemoryObjects("lost", "s"), Clock()
    key = writer_lease_key("p-0")
    with pytest.raises(lease_mod.LeaseHeldError):
        lease_mod.Lease.acquire(objects, key, purpose="sealer", clock=clock)
    clock.t += lease_mod.DEFAULT_TTL_S
    lease_mod.Lease.acquire(objects, key, purpose="sealer", clock=clock).release()


def unstaged_txn(store: QuiverStore, version: int, lo: int, n: int) -> int:
    """A write task paused after its rows were durable in its WAL, before it staged
    them: never reported, never committed."""
    txn = store.begin_txn(APP, version)
    store.append(id_batch(lo, n), txn_id=txn)
    store.flush()
    return txn


@pytest.mark.parametrize("version_of_b", [1, 2], ids=["same batch", "a later batch"])
def test_a_returning_machine_never_seals_its_own_rows_under_another_machines_committed_id(
    tmp_path: Path, version_of_b: int
) -> None:
    a = machine(tmp_path, "a")
    ta = unstaged_txn(a, 1, 0, 3)
    lose(a, None)  # paused or gone, its disk kept
    take_over_and_release()

    b = machine(tmp_path, "b")
    tb = task(b, version_of_b, 100, 3)
    assert tb == ta, "the scenario needs the second machine to reuse the id"
    assert b.commit_txn(APP, version_of_b, [("p-0", tb)], rows=3)
    lose(b, tmp_path / "wal-b")  # lost with its disk before it sealed
    take_over_and_release()

    back = machine(tmp_path, "a")  # A's WAL still holds its own transaction ta
    back.close()
    obs = observer(tmp_path)
    assert scanned_ids(obs) == [100, 101, 102]
    assert staged() == []
    obs.close()


def test_a_returning_machine_still_seals_its_own_committed_staged_transaction_from_its_wal(
    tmp_path: Path,
) -> None:
    """The check reads the staged object; its own, it seals from its WAL as before."""
    a = machine(tmp_path, "a")
    ta = task(a, 1, 0, 3)
    assert a.commit_txn(APP, 1, [("p-0", ta)], rows=3)
    lose(a, None)
    take_over_and_release()

    back = machine(tmp_path, "a")
    assert back.recovery is not None and back.recovery.pending_txns == 0
    back.close()
    obs = observer(tmp_path)
    assert scanned_ids(obs) == [0, 1, 2]
    assert staged() == []
    obs.close()
