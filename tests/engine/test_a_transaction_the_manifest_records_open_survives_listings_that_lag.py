"""A transaction the MANIFEST records open (``txns_open``, ARCHITECTURE.md §10.2) is never
retired by the partition's next holder because its listings of ``txns/`` lag behind the
bucket: a lost machine's staged transaction, open at its last publication and committed
afterwards, hidden from the listing of the next holder's open and from the one of its
first publication, is still looked at (one GET) and sealed from the bucket, its rows
published once, instead of being retired by the new holder's ``txn_high`` and deleted
as garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.control.manifest import Manifest
from quiver_spark.objects.memory import MemoryObjects
from tests.engine.test_a_stale_listing_never_turns_a_committed_staged_transaction_into_garbage import (
    rebooted_on_a_stale_listing,
)
from tests.lost_machines import APP, Clock, lose, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def manifest() -> Manifest:
    got = MemoryObjects("lost", "s").get("partitions/p-0/MANIFEST")
    assert got is not None
    return Manifest.decode("MANIFEST", got.data)


def test_a_committed_transaction_recorded_open_is_sealed_though_every_listing_hid_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 1)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=1)
    snapshot = MemoryObjects("lost", "s").snapshot()  # before t2 is staged
    t2 = task(lost, 2, 50, 3)  # staged; its batch not committed yet
    t3 = task(lost, 3, 10, 2)
    assert lost.commit_txn(APP, 3, [("p-0", t3)], rows=2)
    assert lost.writer is not None
    lost.writer.maintain()
    lost.finalize()  # t1 and t3 published, t2 recorded open
    assert t2 in manifest().txns_open
    assert lost.commit_txn(APP, 2, [("p-0", t2)], rows=3)  # then the machine is lost
    lose(lost, tmp_path / "wal-a")

    back = rebooted_on_a_stale_listing(tmp_path, monkeypatch, snapshot)
    assert back.writer is not None
    back.objects.faults.stale_list = snapshot  # its first publication's listing lags too
    t4 = task(back, 4, 20, 2)
    assert back.commit_txn(APP, 4, [("p-0", t4)], rows=2)
    back.writer.maintain()
    back.finalize()
    back.objects.faults.stale_list = None
    back.close()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()
    assert scanned_ids(obs) == [0, 10, 11, 20, 21, 50, 51, 52]
    assert manifest().retired(t2)  # sealed, then retired
    assert staged() == []
