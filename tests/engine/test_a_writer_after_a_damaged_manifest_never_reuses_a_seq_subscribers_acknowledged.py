"""A writer never reuses a seq subscribers acknowledged, even after the partition's
MANIFEST was damaged.

Retention deletes a segment once every subscriber acknowledged it, and the ack log
keeps that seq done for them (ARCHITECTURE.md §13.4). If the partition's MANIFEST is
then damaged, the next writer rewrites it from a listing (§11.1), where no object of
the deleted seqs is left. A writer new to the root (its machine has no STATE) must
still start above every seq the ack log records: a reused seq is already done for
every subscriber, so its rows, acknowledged to the writer's caller, would be deleted
by the next retention pass without anyone reading them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

ROOT = "memory://reused-seq/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_writer_after_a_damaged_manifest_never_reuses_a_seq_subscribers_acknowledged(
    tmp_path: Path,
):
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        for lo in (0, 3):
            a.append(id_batch(lo))
            a.flush()
            assert a.finalize() is not None
    driver.subscribers.record("s", "p-0", [1, 2], Outcome.ACK)
    assert driver.run_retention().deleted == {"p-0": [1, 2]}

    objects = MemoryObjects("reused-seq", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    # a writer on a machine new to the root: its open rewrites the MANIFEST
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-b"), partition="p-0") as b:
        b.append(id_batch(100))
        b.flush()  # acknowledged
        meta = b.finalize()  # then retention runs
        assert scanned_ids(b) == [100, 101, 102]
        assert meta is not None and meta.seq > 2
    driver.close()
