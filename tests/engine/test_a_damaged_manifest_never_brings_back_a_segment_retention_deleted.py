"""A segment retention deleted stays deleted when its partition's MANIFEST is damaged.

On an object root retention removes a segment's entry from the MANIFEST (the
publication point), records the deletion in the ack log, then deletes its objects
(ARCHITECTURE.md §11.3). When that last step fails, the objects are orphans until gc.
If the MANIFEST is then damaged, readers decide the partition by its files (§11.1) and
its next writer rewrites the MANIFEST from a listing: neither may publish again a seq
the ack log records as deleted, or a scan returns rows retention removed and a
subscriber's deleted segment is back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

ROOT = "memory://rd/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def objects() -> MemoryObjects:
    return MemoryObjects("rd", "s")


def published(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return [m.seq for m in store.segments("p-0")]


def test_a_damaged_manifest_never_brings_back_a_segment_retention_deleted(tmp_path: Path):
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0") as w:
        for lo in (0, 3, 6):
            w.append(id_batch(lo))
            w.flush()
            assert w.finalize() is not None
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None)
    driver.subscribers.register("s")
    driver.subscribers.record("s", "p-0", [1, 2], Outcome.ACK)

    def delete_fails(op: str, key: str) -> None:
        if op == "delete" and key.endswith(".meta"):
            raise OSError("the storage did not answer")

    driver.objects.faults.before = delete_fails
    try:
        driver.run_retention()
    except OSError:
        pass  # the pass is retried later; its objects are orphans until then
    driver.objects.faults.before = None
    driver.close()
    assert published(tmp_path, "wal-r1") == [3]
    assert any(o.key.endswith("2.meta") for o in objects().list("segments/p-0/"))

    manifest = objects().get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects().put("partitions/p-0/MANIFEST", bytes(damaged))

    assert published(tmp_path, "wal-r2") == [3]  # readers decide by the files
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-w"), partition="p-0") as w:
        assert scanned_ids(w) == [6, 7, 8]  # its open rewrote the MANIFEST
    assert published(tmp_path, "wal-r3") == [3]
