"""A staged object is published only for the transaction its key names
(ARCHITECTURE.md §10.2).

Its body names its partition and transaction id; an object whose body names another
transaction or another partition than its key (copied or renamed into place, a
bucket restored from a mixed backup) is damage: whoever seals the partition (an
observer or its next writer) leaves it in place and names it, and never publishes
its rows as the transaction of the key, whose batch may have been decided without
them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError
from quiver_spark.fsck import check_store
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.staging import stage, staged_key
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry, staged, task
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def rebooted(tmp_path: Path) -> QuiverStore:
    """Machine a reboots (new boot id, empty ``wal.path``) and, once its old lease was
    seen unchanged for its ttl, takes its slot's lease again."""
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    for seen in lease_mod._seen.values():  # watched for a ttl (instead of waiting)
        seen.first -= lease_mod.DEFAULT_TTL_S + 1
    return machine(tmp_path, "a", pid=9000, node="node-a-rebooted")


def _bucket() -> MemoryObjects:
    return MemoryObjects("lost", "s")


def fsck_names(store: QuiverStore, txn: int) -> bool:
    """fsck reports p-0's staged object of ``txn`` as problem ``staged``."""
    key = staged_key("p-0", txn)
    return any(f.kind == "staged" and key in f.file for f in check_store(store).problems)


def _a_winner_whose_object_holds_a_losers_rows(tmp_path: Path) -> int:
    """Machine a stages two attempts of batch 1; the driver commits the first; the
    winner's key then holds the loser's bytes; the machine and its disk are lost."""
    lost = machine(tmp_path, "a")
    winner = task(lost, 1, 0, 3)
    loser = task(lost, 1, 100, 3)  # an attempt Spark did not deliver
    assert lost.commit_txn(APP, 1, [("p-0", winner)], rows=3)
    lose(lost, tmp_path / "wal-a")
    objects = _bucket()
    got = objects.get(staged_key("p-0", loser))
    assert got is not None
    objects.put(staged_key("p-0", winner), got.data)
    return winner


def test_an_observer_never_publishes_another_transactions_rows_under_a_winners_key(
    tmp_path: Path,
) -> None:
    winner = _a_winner_whose_object_holds_a_losers_rows(tmp_path)
    clock = Clock()
    obs = observer(tmp_path, clock)
    seal_after_expiry(obs, clock)
    assert 100 not in scanned_ids(obs)  # the loser's rows are never readable
    assert winner in staged()  # left in place for fsck
    assert "p-0" in obs.idle_failures  # and named
    assert fsck_names(obs, winner)


def test_the_next_writer_never_publishes_another_transactions_rows_under_a_winners_key(
    tmp_path: Path,
) -> None:
    winner = _a_winner_whose_object_holds_a_losers_rows(tmp_path)
    nxt = rebooted(tmp_path)  # an empty wal.path: it seals what its WAL lacks
    assert nxt.writer is not None
    nxt.writer.maintain()
    nxt.close()
    assert 100 not in scanned_ids(nxt)
    assert winner in staged()


def test_an_observer_never_publishes_another_partitions_object_as_its_own(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    winner = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", winner)], rows=3)
    lose(lost, tmp_path / "wal-a")
    objects = _bucket()
    stage(objects, "p-9", winner, APP, 1, [id_batch(900, 3)])  # p-9's own object
    got = objects.get(staged_key("p-9", winner))
    assert got is not None
    objects.put(staged_key("p-0", winner), got.data)  # copied over p-0's

    clock = Clock()
    obs = observer(tmp_path, clock)
    seal_after_expiry(obs, clock)
    m = obs.manifests.read("p-0")
    assert m is None or winner not in m.sealed_txns()  # p-9's rows are not p-0's
    assert 900 not in [i for b in obs.scan() for i in b.column("id").to_pylist()]
    assert fsck_names(obs, winner)
