"""A damaged MANIFEST never lists a fenced writer's orphan beside the segment its rows
were moved to.

A writer whose lease was taken over while it was paused creates its segment's objects
(its STATE names the segment: its commit point) before its MANIFEST change is refused;
the objects stay as an orphan under a seq its successor records void (ARCHITECTURE.md
§11.3). When its machine comes back, its recovery moves that segment's bytes to the
next free seq and publishes them there. So the same rows are in two segments, one of
them never published; when the MANIFEST is then damaged, readers decide the partition
by its files (§11.1) and must not read those rows twice. Plain rows carry no
transaction that would tell the orphan apart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import fenced_finalize, id_batch, scanned_ids, taken_over_after_publishing, wal_in

ROOT = "memory://fenced-moved/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")
ROWS = [0, 1, 2, 100, 101, 102, 200, 201, 202]


def scanned(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return scanned_ids(store)


def test_a_damaged_manifest_never_lists_a_fenced_writers_orphan_beside_its_moved_segment(
    tmp_path: Path,
):
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie, lo=100)  # its objects of seq 2 stay: an orphan
    zombie.close()
    successor.append(id_batch(200))
    successor.flush()
    assert successor.finalize() is not None
    successor.close()
    # the paused writer's machine comes back: its recovery publishes rows 100..102
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as back:
        back.finalize()
    assert scanned(tmp_path, "wal-r1") == ROWS

    objects = MemoryObjects("fenced-moved", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    assert scanned(tmp_path, "wal-r2") == ROWS  # decided by the files
