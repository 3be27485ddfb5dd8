"""A damaged MANIFEST never makes a fenced writer's orphan readable.

A writer whose lease was taken over while it was paused creates its segment's objects
before its MANIFEST change is refused; they stay as an orphan under a seq the
MANIFEST records void, and nobody removes them but gc (ARCHITECTURE.md §11.3: a
holder never removes an upload it did not publish). Its successor seals the same
committed transaction from its staged object (§10.2). So when the MANIFEST is
damaged, readers deciding the partition by its files (§11.1) must not take the orphan
for a published segment: the transaction's rows would be read twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import id_batch, scanned_ids, taken_over_while_paused, wal_in

ROOT = "memory://fenced-orphan/s"
APP = "query-1"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def scanned(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return scanned_ids(store)


def test_a_damaged_manifest_never_publishes_a_fenced_writers_orphan(tmp_path: Path):
    zombie = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0", background=False)
    txn = zombie.begin_txn(APP, 0)
    zombie.append(id_batch(100), txn_id=txn)
    zombie.flush()
    assert zombie.stage_txn(txn) > 0
    assert zombie.commit_txn(APP, 0, [("p-0", txn)], rows=3)
    successor = taken_over_while_paused(
        zombie,
        lambda: QuiverStore.open(
            ROOT, wal_in(tmp_path / "wal-b"), partition="p-0", background=False
        ),
    )
    zombie.writer.maintain()  # the committed transaction joins its open segment
    with pytest.raises(LeaseLostError):
        zombie.finalize()  # its objects of seq 1 stay: an orphan
    successor.writer.maintain()  # seals the transaction from its staged object
    successor.finalize()
    successor.close()
    assert scanned(tmp_path, "wal-r1") == [100, 101, 102]

    objects = MemoryObjects("fenced-orphan", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    assert scanned(tmp_path, "wal-r2") == [100, 101, 102]  # decided by the files
