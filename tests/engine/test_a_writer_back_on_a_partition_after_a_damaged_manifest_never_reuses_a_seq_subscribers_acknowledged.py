"""A writer that comes back to a partition it wrote before never reuses a seq
subscribers acknowledged, even after the partition's MANIFEST was damaged.

A writer's STATE on its machine's disk (``wal.path``) names the next seq it would
use. When the partition's slot moves to another machine and back (an executor's
slot is reassigned, a machine returns), that STATE is older than the partition: the
other machine published later seqs, which subscribers acknowledged and retention
deleted. If the MANIFEST is then damaged, the writer's open rewrites it from a
listing (§11.1) where none of those seqs is left: only the ack log's deleted marks
still know them. Starting from its own STATE, the writer would publish under a seq
already done for every subscriber: its rows, acknowledged to its caller, are never
delivered and the next retention pass deletes them (ARCHITECTURE.md §11.3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

ROOT = "memory://writer-back/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_writer_back_on_a_partition_after_a_damaged_manifest_never_reuses_an_acknowledged_seq(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        a.append(id_batch(0))
        a.flush()
        assert a.finalize() is not None  # seq 1; machine a's STATE: next seq 2
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-b"), partition="p-0") as b:
        for lo in (3, 6):
            b.append(id_batch(lo))
            b.flush()
            assert b.finalize() is not None  # seqs 2 and 3, on machine b
    driver.subscribers.record("s", "p-0", [1, 2, 3], Outcome.ACK)
    assert driver.run_retention().deleted == {"p-0": [1, 2, 3]}

    objects = MemoryObjects("writer-back", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    # the slot is back on machine a, whose STATE is older than the partition
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        a.append(id_batch(100))
        a.flush()  # acknowledged
        meta = a.finalize()
        driver.run_retention()
        assert scanned_ids(a) == [100, 101, 102]
        assert meta is not None and meta.seq > 3
    driver.close()
