"""A staged object whose delete the storage keeps refusing holds back at most its
own partition's segment: retention of every other partition goes on, and so does
the size cap.

Before a segment leaves the MANIFEST, retention deletes the staged objects still
left for the transactions it names (ARCHITECTURE.md §10.2), and a failure raises
before anything is removed, so that the next pass tries again. A pass deletes
partition after partition: when the refused delete raises out of the whole pass,
no partition after it in that pass's order is reclaimed while the refusal lasts,
whatever its subscribers acknowledged, and the store stays over its size cap (once
recorded deleted, the stuck segment is a steady-state deletion, which a pass orders
before the size cap's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore, RetentionConfig, SizeCapPolicy
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, wal_in

ROOT = "memory://undeletable-staged/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def refuse_p0_staged_deletes(op: str, key: str) -> None:
    if op == "delete" and key.startswith("partitions/p-0/txns/"):
        raise PermissionError(f"AccessDenied: the storage refuses to delete {key}")


def healthy_segments(tmp_path: Path, n: int) -> None:
    """``n`` segments of p-1 (the storage refuses p-0's staged deletes to its passes too)."""
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-1"), partition="p-1") as w:
        w.objects.faults.before = refuse_p0_staged_deletes
        for k in range(n):
            w.append(id_batch(10 * k))
            w.flush()
            assert w.finalize() is not None


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
    assert [o.key for o in MemoryObjects("undeletable-staged", "s").list("partitions/p-0/txns/")]


def passes(driver: QuiverStore, n: int = 3) -> None:
    """``n`` retention passes, as a writer's maintenance runs them (a failure is kept)."""
    driver.objects.faults.before = refuse_p0_staged_deletes
    for _ in range(n):
        try:
            driver.run_retention()
        except PermissionError:
            pass


def test_acknowledged_segments_of_other_partitions_are_still_deleted(tmp_path: Path) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    healthy_segments(tmp_path, 1)  # older: a steady-state pass deletes the newest first
    sealed_with_a_leftover(tmp_path, driver)
    for p in ("p-0", "p-1"):
        driver.subscribers.record("s", p, [m.seq for m in driver.segments(p)], Outcome.ACK)

    passes(driver)

    assert [m.seq for m in driver.segments("p-1")] == []  # acknowledged by all: reclaimed
    driver.close()


def test_the_size_cap_still_holds(tmp_path: Path) -> None:
    healthy = 6
    probe_root = "memory://undeletable-staged-probe/s"  # the bytes one segment counts for
    with QuiverStore.open(probe_root, wal_in(tmp_path / "wal-x"), partition="p-1") as probe:
        probe.append(id_batch(0))
        probe.flush()
        assert probe.finalize() is not None
        one = probe.run_retention(dry_run=True).plan.bytes_before
    cap = one * 4  # room for four of the seven segments
    driver = QuiverStore.open(
        ROOT,
        wal_in(
            tmp_path / "wal-d",
            retention=RetentionConfig(
                size_cap_bytes=cap, size_cap_policy=SizeCapPolicy.DROP_OLDEST
            ),
        ),
        partition=None,
        background=False,
    )
    driver.subscribers.register("s")  # acknowledges nothing: only the cap reclaims
    sealed_with_a_leftover(tmp_path, driver)  # the oldest segment: the cap's first pick
    healthy_segments(tmp_path, healthy)

    passes(driver)

    held = driver.run_retention(dry_run=True).plan.bytes_before
    assert held <= cap, f"the store holds {held} bytes, over its size cap of {cap}"
    driver.close()
