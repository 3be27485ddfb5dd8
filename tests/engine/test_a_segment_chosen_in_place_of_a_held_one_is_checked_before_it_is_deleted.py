"""A segment the size cap chooses in place of one retention holds is checked before
it is deleted, as every segment a pass chose: one whose ``.meta`` fails verification
is kept as evidence (named damaged, its bytes counted), never deleted.

A pass plans from the MANIFEST's view, then checks what it chose (a ``.meta`` removed
by hand is forgotten, one failing verification is kept, and the plan is made again,
ARCHITECTURE.md §15.1). A segment whose leftover staged objects cannot be removed is
then *held* and the plan made once more (§10.2): the size cap picks other segments in
its place. Those were never checked: a damaged ``.meta`` among them is recorded
deleted and its objects removed, the very evidence ``quiver fsck --quarantine`` is
for, though a pass never deletes a damaged segment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SizeCapPolicy
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import id_batch, wal_in

BUCKET = "held-then-unchecked"
ROOT = f"memory://{BUCKET}/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def refuse_p0_staged_deletes(op: str, key: str) -> None:
    if op == "delete" and key.startswith("partitions/p-0/txns/"):
        raise PermissionError(f"AccessDenied: the storage refuses to delete {key}")


def sealed_with_a_leftover(tmp_path: Path, driver: QuiverStore) -> None:
    """A committed staged transaction of p-0, sealed by its writer, whose staged object
    the storage refuses to delete (then and from now on)."""
    w = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-0"), partition="p-0", background=False)
    txn = w.begin_txn(APP, 0)
    w.append(id_batch(100), txn_id=txn)
    w.flush()
    assert w.stage_txn(txn) > 0
    assert driver.commit_txn(APP, 0, [("p-0", txn)], rows=3)
    w.objects.faults.before = refuse_p0_staged_deletes
    assert w.writer is not None
    w.writer.maintain()
    assert w.finalize() is not None
    w.objects.faults.before = None
    w.close()
    assert [o.key for o in MemoryObjects(BUCKET, "s").list("partitions/p-0/txns/")]


def healthy_segments(tmp_path: Path, n: int) -> None:
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-1"), partition="p-1") as w:
        w.objects.faults.before = refuse_p0_staged_deletes
        for k in range(n):
            w.append(id_batch(10 * k))
            w.flush()
            assert w.finalize() is not None


def damage(key: str) -> None:
    objects = MemoryObjects(BUCKET, "s")
    got = objects.get(key)
    assert got is not None
    damaged = bytearray(got.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put(key, bytes(damaged))


def test_a_damaged_segment_the_size_cap_picks_instead_of_a_held_one_is_kept(
    tmp_path: Path,
) -> None:
    probe_root = "memory://held-then-unchecked-probe/s"  # the bytes one segment counts for
    with QuiverStore.open(probe_root, wal_in(tmp_path / "wal-x"), partition="p-1") as probe:
        probe.append(id_batch(0))
        probe.flush()
        assert probe.finalize() is not None
        one = probe.run_retention(dry_run=True).plan.bytes_before
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")  # acknowledges nothing: only the cap reclaims
    sealed_with_a_leftover(tmp_path, driver)  # the oldest segment: the cap's first pick
    healthy_segments(tmp_path, 6)  # p-1 seqs 1 .. 6
    damage("segments/p-1/00000000000000000003.meta")  # the cap's pick once p-0 is held
    # room for four of the seven segments: the cap drops three, oldest first
    driver.set_policy(
        {"retention.size_cap": one * 4, "retention.size_cap_policy": SizeCapPolicy.DROP_OLDEST}
    )

    driver.objects.faults.before = refuse_p0_staged_deletes
    result = driver.run_retention()
    driver.objects.faults.before = None

    assert result.plan.held == [("p-0", 1)]
    assert 3 not in result.deleted.get("p-1", []), "a damaged segment was deleted"
    assert MemoryObjects(BUCKET, "s").get("segments/p-1/00000000000000000003.meta") is not None
    assert ("p-1", 3) in [(d.partition, d.seq) for d in result.damaged]
    driver.close()
