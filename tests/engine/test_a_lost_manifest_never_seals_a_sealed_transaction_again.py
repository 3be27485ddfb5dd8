"""A staged transaction whose rows a writer already published is never published again
once the partition's MANIFEST is lost (deleted, or damaged and written again from a
listing), even when the staged object outlived its seal (its delete failed: it is
retried with the writer's next publication, §10.2). The segment's ``.meta`` names the
transactions it holds (§5.3, §11.3), so a MANIFEST written from a listing can say
that the transaction is sealed; sealing it again reads its committed rows twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.layout import manifest as manifest_key
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


@pytest.mark.parametrize("manifest", ["deleted", "damaged"])
def test_a_transaction_sealed_before_its_manifest_was_lost_is_read_once(
    tmp_path: Path, manifest: str
) -> None:
    a = machine(tmp_path, "a")
    t1 = task(a, 1, 0, 3)
    assert a.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert a.writer is not None
    a.writer.maintain()
    objects = a.objects
    assert isinstance(objects, MemoryObjects)

    def staged_delete_fails(op: str, key: str) -> None:
        if op == "delete" and "/txns/" in key:
            raise OSError("503 SlowDown")

    objects.faults.before = staged_delete_fails
    assert a.finalize() is not None  # sealed from the WAL; its staged object stays
    objects.faults.before = None
    a.close()
    assert staged() == [t1]
    assert scanned_ids(observer(tmp_path)) == [0, 1, 2]
    bucket, key = MemoryObjects("lost", "s"), manifest_key("p-0")
    got = bucket.get(key)
    assert got is not None
    if manifest == "deleted":
        bucket.delete(key)
    else:
        bucket.replace(key, got.data[:-4] + b"\x00\x01\x02\x03", version=got.version)
    observer(tmp_path).finalize_idle_partitions()  # the driver's observer pass
    b = machine(tmp_path, "b")  # the slot's next writer
    assert b.writer is not None
    b.writer.maintain()
    b.finalize()
    b.close()
    observer(tmp_path).finalize_idle_partitions()
    assert scanned_ids(observer(tmp_path)) == [0, 1, 2]
