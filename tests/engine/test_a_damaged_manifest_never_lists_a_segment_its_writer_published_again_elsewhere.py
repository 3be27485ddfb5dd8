"""A damaged MANIFEST never lists a paused writer's segment beside the one its machine
published the same rows in when it came back.

A writer pauses between its segment's ``.meta`` and its MANIFEST change (the
publication, ARCHITECTURE.md §11.3); meanwhile its successor takes the lease over and
publishes, recording the paused writer's seq void. The paused writer's MANIFEST change
is then refused; when its machine comes back, its recovery moves the segment its
STATE names to the next free seq and publishes it there. The first seq's ``.arrow``
and ``.meta`` stay (both made while its lease was still its own). When the MANIFEST is
damaged, readers decide the partition by its files (§11.1) and must not read those
rows twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import id_batch, scanned_ids, taken_over_while_paused, wal_in

ROOT = "memory://paused-at-manifest/s"
ROWS = [0, 1, 2, 100, 101, 102]

pytestmark = pytest.mark.usefixtures("fresh_memory")


def scanned(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return scanned_ids(store)


def test_a_damaged_manifest_never_lists_a_segment_its_writer_published_again_elsewhere(
    tmp_path: Path,
):
    zombie = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0", background=False)
    zombie.append(id_batch(0))
    zombie.flush()

    def successor_publishes() -> None:
        successor = taken_over_while_paused(
            zombie,
            lambda: QuiverStore.open(
                ROOT, wal_in(tmp_path / "wal-b"), partition="p-0", background=False
            ),
        )
        successor.append(id_batch(100))
        successor.flush()
        assert successor.finalize() is not None
        successor.close()

    paused: list[str] = []

    def pause_at_publication(op: str, key: str) -> None:
        if op == "replace" and key.endswith("MANIFEST") and not paused:
            paused.append(key)
            successor_publishes()

    zombie.objects.faults.before = pause_at_publication
    with pytest.raises(LeaseLostError):
        zombie.finalize()  # its seq 1 has its .arrow and .meta; its MANIFEST change is refused
    zombie.objects.faults.before = None
    assert paused
    zombie.close()
    # the paused writer's machine comes back: its recovery publishes rows 0..2 elsewhere
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as back:
        back.finalize()
    assert scanned(tmp_path, "wal-r1") == ROWS

    objects = MemoryObjects("paused-at-manifest", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    assert scanned(tmp_path, "wal-r2") == ROWS  # decided by the files
