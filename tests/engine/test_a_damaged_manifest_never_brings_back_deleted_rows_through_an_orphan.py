"""A damaged MANIFEST never brings back, through a fenced writer's orphan, rows that
retention deleted.

A writer whose lease was taken over while it was paused leaves its segment's objects
as an orphan under a seq the MANIFEST records void (ARCHITECTURE.md §11.3); its
successor seals the same committed transaction from its staged object (§10.2), and
once every subscriber acknowledged that segment retention deletes it. The orphan is
still there until gc. When the MANIFEST is then damaged, readers decide the partition
by its files (§11.1): the orphan must not be taken for a published segment, or rows
retention deleted are read again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, taken_over_while_paused, wal_in

ROOT = "memory://fenced-orphan-deleted/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def scanned(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return scanned_ids(store)


def test_a_damaged_manifest_never_brings_back_deleted_rows_through_an_orphan(tmp_path: Path):
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    zombie = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0", background=False)
    txn = zombie.begin_txn(APP, 0)
    zombie.append(id_batch(100), txn_id=txn)
    zombie.flush()
    assert zombie.stage_txn(txn) > 0
    assert driver.commit_txn(APP, 0, [("p-0", txn)], rows=3)
    successor = taken_over_while_paused(
        zombie,
        lambda: QuiverStore.open(
            ROOT, wal_in(tmp_path / "wal-b"), partition="p-0", background=False
        ),
    )
    zombie.writer.maintain()  # the committed transaction joins its open segment
    with pytest.raises(LeaseLostError):
        zombie.finalize()  # fenced: what it uploaded of seq 1 stays, never published
    successor.writer.maintain()  # seals the transaction from its staged object
    successor.close()
    published = [m.seq for m in driver.segments("p-0")]
    assert len(published) == 1  # the transaction, once
    driver.subscribers.record("s", "p-0", published, Outcome.ACK)
    assert driver.run_retention().deleted == {"p-0": published}
    driver.close()
    assert scanned(tmp_path, "wal-r1") == []

    objects = MemoryObjects("fenced-orphan-deleted", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    assert scanned(tmp_path, "wal-r2") == []  # decided by the files
