"""A writer that comes back to a partition it wrote before never reuses a seq
subscribers acknowledged, even when the partition's GONE does not record those seqs
(the retention pass that deleted them could not write it, died before it did, or GONE
was damaged) and the MANIFEST was damaged afterwards.

On an object root the seqs gone and the partition's ``high`` are kept twice: in the
MANIFEST and in ``partitions/<pid>/GONE`` (ARCHITECTURE.md §15.4). The GONE write is
best effort: a failure is logged, the pass goes on deleting the segments, and "the
ack log's deleted marks cover the seqs meanwhile". A writer whose STATE on its own
disk is older than its partition (its slot moved to another machine and back) never
reads the ack log's deleted marks, though: if the MANIFEST is damaged before the next
removal writes GONE again, the writer's open rewrites it from a listing where none of
the deleted seqs is left, joined with a GONE that never learned them, and the writer
publishes under a seq every subscriber already acknowledged. Its rows, acknowledged
to its caller, are never delivered and the next retention pass deletes them. The same
holds when GONE and the MANIFEST are both damaged, where §15.4 says the writer falls
back to the ack log's marks: a writer with a STATE never reads them. And a pass
that dies between its MANIFEST change and its GONE write needs no storage failure at
all: the pass that finishes its deletion (``quiver gc --full``) changes no MANIFEST,
so it writes no GONE either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

BUCKET = "writer-back-gone-unwritten"
ROOT = f"memory://{BUCKET}/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def damage(key: str) -> None:
    objects = MemoryObjects(BUCKET, "s")
    got = objects.get(key)
    assert got is not None
    damaged = bytearray(got.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put(key, bytes(damaged))


def three_seqs_on_two_machines(tmp_path: Path, driver: QuiverStore) -> None:
    """Seq 1 by machine a (its STATE: next seq 2), seqs 2 and 3 by machine b, all
    acknowledged by the one subscriber."""
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        a.append(id_batch(0))
        a.flush()
        assert a.finalize() is not None
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-b"), partition="p-0") as b:
        for lo in (3, 6):
            b.append(id_batch(lo))
            b.flush()
            assert b.finalize() is not None
    driver.subscribers.record("s", "p-0", [1, 2, 3], Outcome.ACK)


def machine_a_writes_again(tmp_path: Path, driver: QuiverStore) -> None:
    """The slot is back on machine a, whose STATE is older than the partition."""
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        a.append(id_batch(100))
        a.flush()  # acknowledged
        meta = a.finalize()
        driver.run_retention()
        assert meta is not None and meta.seq > 3, "a seq every subscriber acknowledged, reused"
        assert scanned_ids(a) == [100, 101, 102]


def test_a_transient_failure_of_the_gone_write_never_lets_a_writer_reuse_an_acknowledged_seq(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    three_seqs_on_two_machines(tmp_path, driver)
    failed: list[str] = []

    def one_unavailable_gone_write(op: str, key: str) -> None:
        if op in ("create", "replace", "put") and key.endswith("/GONE") and not failed:
            failed.append(key)
            raise ConnectionError(f"503 SlowDown: {key}")

    driver.objects.faults.before = one_unavailable_gone_write
    first = driver.run_retention()  # deletes them, or holds them until GONE can say so
    assert first.deleted in ({"p-0": [1, 2, 3]}, {})
    if not first.deleted:
        assert first.plan.held == [("p-0", q) for q in [1, 2, 3]]
    driver.objects.faults.before = None
    assert failed == ["partitions/p-0/GONE"]  # one request refused, nothing else
    driver.run_retention()  # what was held goes now

    damage("partitions/p-0/MANIFEST")
    machine_a_writes_again(tmp_path, driver)
    driver.close()


class Crash(BaseException):
    """The process dies here."""


def test_a_pass_that_died_before_its_gone_write_never_lets_a_writer_reuse_an_acknowledged_seq(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    three_seqs_on_two_machines(tmp_path, driver)

    def dies_at_the_gone_write(op: str, key: str) -> None:
        if op in ("create", "replace", "put") and key.endswith("/GONE"):
            raise Crash(key)

    driver.objects.faults.before = dies_at_the_gone_write
    with pytest.raises(Crash):
        driver.run_retention()  # the MANIFEST records 1 .. 3 deleted, GONE does not
    driver.objects.faults.before = None
    driver.close()

    # a new process finishes the deletion (`quiver gc --full`)
    gc = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-gc"), partition=None, background=False)
    gc.run_retention(listing=True)
    assert not MemoryObjects(BUCKET, "s").list("segments/p-0/")

    damage("partitions/p-0/MANIFEST")
    machine_a_writes_again(tmp_path, gc)
    gc.close()


def test_a_damaged_gone_beside_a_damaged_manifest_never_lets_a_writer_reuse_an_acknowledged_seq(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    three_seqs_on_two_machines(tmp_path, driver)
    first = driver.run_retention()  # deletes them, or holds them until GONE can say so
    assert first.deleted in ({"p-0": [1, 2, 3]}, {})
    if not first.deleted:
        assert first.plan.held == [("p-0", q) for q in [1, 2, 3]]

    damage("partitions/p-0/GONE")
    damage("partitions/p-0/MANIFEST")
    machine_a_writes_again(tmp_path, driver)  # the ack log still records 1 .. 3 deleted
    driver.close()
