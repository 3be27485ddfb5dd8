"""A transaction whose segment retention deleted is never sealed again from its
leftover staged object, even after the partition's MANIFEST was damaged.

A writer seals a committed staged transaction and then deletes its staged object
(best effort, ARCHITECTURE.md §10.2); when that delete fails the object stays until a
later pass removes it, the MANIFEST naming the transaction as sealed. Once every
subscriber acknowledged the segment, retention deletes it. If the MANIFEST is then
damaged, the partition's next writer rewrites it from a listing (§11.1), where neither
the segment nor its ``.meta`` is left to name the transaction: the writer must still
not take the leftover staged object for a transaction nobody sealed, or rows
retention deleted are read again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

ROOT = "memory://sealed-deleted/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_damaged_manifest_never_seals_again_a_transaction_retention_deleted(tmp_path: Path):
    objects = MemoryObjects("sealed-deleted", "s")
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    w = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0", background=False)
    txn = w.begin_txn(APP, 0)
    w.append(id_batch(100), txn_id=txn)
    w.flush()
    assert w.stage_txn(txn) > 0
    assert driver.commit_txn(APP, 0, [("p-0", txn)], rows=3)

    def staged_delete_fails(op: str, key: str) -> None:
        if op == "delete" and key.endswith(".txn"):
            raise PermissionError("the storage refused the delete")

    w.objects.faults.before = staged_delete_fails
    assert w.writer is not None
    w.writer.maintain()  # the transaction is sealed; its staged object stays
    w.finalize()
    w.objects.faults.before = None
    w.close()
    assert [o.key for o in objects.list("partitions/p-0/txns/")]  # left over
    [seq] = [m.seq for m in driver.segments("p-0")]
    driver.subscribers.record("s", "p-0", [seq], Outcome.ACK)
    assert driver.run_retention().deleted == {"p-0": [seq]}
    driver.close()

    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0") as back:
        assert back.writer is not None
        back.writer.maintain()  # the writer's open rewrote the MANIFEST; its tick seals
        back.finalize()
        assert scanned_ids(back) == []


def test_retention_keeps_a_segment_whose_leftover_staged_object_it_could_not_remove(
    tmp_path: Path,
):
    """The leftover staged object goes before the segment does; when its delete fails
    the pass keeps the segment published (held: nothing half-removed, nothing recorded
    deleted), and the next pass deletes both."""
    objects = MemoryObjects("sealed-deleted", "s")
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    w = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0", background=False)
    txn = w.begin_txn(APP, 0)
    w.append(id_batch(100), txn_id=txn)
    w.flush()
    assert w.stage_txn(txn) > 0
    assert driver.commit_txn(APP, 0, [("p-0", txn)], rows=3)

    def staged_delete_fails(op: str, key: str) -> None:
        if op == "delete" and key.endswith(".txn"):
            raise PermissionError("the storage refused the delete")

    w.objects.faults.before = staged_delete_fails
    assert w.writer is not None
    w.writer.maintain()
    w.finalize()
    w.close()
    [seq] = [m.seq for m in driver.segments("p-0")]
    driver.subscribers.record("s", "p-0", [seq], Outcome.ACK)
    driver.objects.faults.before = staged_delete_fails
    held = driver.run_retention()
    assert held.deleted == {} and held.plan.held == [("p-0", seq)]
    assert [m.seq for m in driver.segments("p-0")] == [seq]
    assert [o.key for o in objects.list("") if o.key.endswith(".arrow")]
    driver.objects.faults.before = None
    assert driver.run_retention().deleted == {"p-0": [seq]}
    assert [o.key for o in objects.list("partitions/p-0/txns/")] == []
    assert [o.key for o in objects.list("") if o.key.endswith((".arrow", ".meta"))] == []
    driver.close()
