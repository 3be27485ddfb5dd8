"""A staged object whose delete the storage refuses holds back only the segments
whose transactions it belongs to: the other segments of its partition, which name no
transaction or none left staged, are reclaimed as usual, and the size cap never drops
rows a subscriber has not read in their place.

Before a segment leaves the MANIFEST, retention removes the staged objects still left
for the transactions it names (ARCHITECTURE.md §10.2); a partition where that fails
has its segments held for the pass and the plan is made again without them. Held are
all the segments of the partition the pass chose, though a segment of plain appends
has nothing left to remove: acknowledged segments stay for as long as the refusal
lasts, their bytes count, and under ``drop_oldest`` the size cap drops other
partitions' unread segments to make up for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SizeCapPolicy
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, wal_in

BUCKET = "held-partition"
ROOT = f"memory://{BUCKET}/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def refuse_p0_staged_deletes(op: str, key: str) -> None:
    if op == "delete" and key.startswith("partitions/p-0/txns/"):
        raise PermissionError(f"AccessDenied: the storage refuses to delete {key}")


def p0_sealed_with_a_leftover_then_plain(tmp_path: Path, driver: QuiverStore, n: int) -> None:
    """p-0 seq 1: a committed staged transaction sealed by its writer, whose staged
    object the storage refuses to delete (then and from now on); seqs 2 .. n + 1:
    plain appends, no transaction."""
    w = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-0"), partition="p-0", background=False)
    w.objects.faults.before = refuse_p0_staged_deletes
    txn = w.begin_txn(APP, 0)
    w.append(id_batch(100), txn_id=txn)
    w.flush()
    assert w.stage_txn(txn) > 0
    assert driver.commit_txn(APP, 0, [("p-0", txn)], rows=3)
    assert w.writer is not None
    w.writer.maintain()
    assert w.finalize() is not None
    for k in range(n):
        w.append(id_batch(200 + 10 * k))
        w.flush()
        assert w.finalize() is not None
    w.close()
    assert [o.key for o in MemoryObjects(BUCKET, "s").list("partitions/p-0/txns/")]


def p1_segments(tmp_path: Path, n: int) -> None:
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-1"), partition="p-1") as w:
        w.objects.faults.before = refuse_p0_staged_deletes
        for k in range(n):
            w.append(id_batch(10 * k))
            w.flush()
            assert w.finalize() is not None


def one_segment_bytes(tmp_path: Path) -> int:
    probe_root = "memory://held-partition-probe/s"
    with QuiverStore.open(probe_root, wal_in(tmp_path / "wal-x"), partition="p-1") as probe:
        probe.append(id_batch(0))
        probe.flush()
        assert probe.finalize() is not None
        return probe.run_retention(dry_run=True).plan.bytes_before


def test_acknowledged_segments_without_a_leftover_are_reclaimed_beside_a_held_one(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    p0_sealed_with_a_leftover_then_plain(tmp_path, driver, 3)
    driver.subscribers.record("s", "p-0", [1, 2, 3, 4], Outcome.ACK)

    driver.objects.faults.before = refuse_p0_staged_deletes
    result = driver.run_retention()

    assert result.plan.held == [("p-0", 1)]
    assert result.deleted == {"p-0": [2, 3, 4]}
    assert [m.seq for m in driver.segments("p-0")] == [1]
    driver.close()


def test_the_size_cap_never_drops_unread_rows_while_acknowledged_ones_are_held(
    tmp_path: Path,
) -> None:
    one = one_segment_bytes(tmp_path)
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    p0_sealed_with_a_leftover_then_plain(tmp_path, driver, 3)  # p-0 seqs 1 .. 4
    p1_segments(tmp_path, 3)  # p-1 seqs 1 .. 3, which the subscriber has not read
    driver.subscribers.record("s", "p-0", [1, 2, 3, 4], Outcome.ACK)
    # room for p-0's held segment and p-1's three, once p-0's acknowledged ones are gone
    driver.set_policy(
        {
            "retention.size_cap": one * 4 + one // 2,
            "retention.size_cap_policy": SizeCapPolicy.DROP_OLDEST,
        }
    )

    driver.objects.faults.before = refuse_p0_staged_deletes
    result = driver.run_retention()

    assert result.dropped == {}, f"unread rows dropped: {result.dropped}"
    assert [m.seq for m in driver.segments("p-1")] == [1, 2, 3]
    driver.close()
