"""A staged transaction the partition's next writer did not see in its listing of
``txns/`` is never taken for garbage (ARCHITECTURE.md §10.2, the transaction floor).

The floor a writer records says every transaction id at or below it is sealed or
decided against. A writer that opens on a listing that lags behind the bucket (a
stale listing) does not know a lost machine's newest staged transaction: its floor
must not cover it, so the next observer pass still seals it once it is committed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError
from quiver_spark.objects import memory as memory_mod
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, Clock, lose, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def rebooted_on_a_stale_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot: dict
) -> QuiverStore:
    """Machine a reboots with an empty ``wal.path``; every listing its open makes
    answers from ``snapshot``."""
    faults = memory_mod.Faults
    monkeypatch.setattr(memory_mod, "Faults", lambda: faults(stale_list=snapshot))
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    for seen in lease_mod._seen.values():  # watched for a ttl (instead of waiting)
        seen.first -= lease_mod.DEFAULT_TTL_S + 1
    back = machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    monkeypatch.setattr(memory_mod, "Faults", faults)
    back.objects.faults.stale_list = None  # listings are current again
    return back


def test_a_committed_staged_transaction_missing_from_a_stale_listing_is_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = machine(tmp_path, "a")
    t0 = task(lost, 1, 50, 1)
    snapshot = MemoryObjects("lost", "s").snapshot()  # t0 staged, t1 not yet
    t1 = task(lost, 2, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t0)], rows=1)
    assert lost.commit_txn(APP, 2, [("p-0", t1)], rows=3)
    lose(lost, tmp_path / "wal-a")

    back = rebooted_on_a_stale_listing(tmp_path, monkeypatch, snapshot)
    assert back.writer is not None
    t2 = task(back, 3, 10, 2)
    assert back.commit_txn(APP, 3, [("p-0", t2)], rows=2)
    back.writer.maintain()
    back.finalize()
    back.close()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()  # the lease was released: at once
    assert scanned_ids(obs) == [0, 1, 2, 10, 11, 50]
    assert staged() == []
