"""A segment retention removed from its partition's MANIFEST is deleted for good, even
when the deletion of its objects failed.

On an object root a retention pass removes the chosen seqs from the MANIFEST, then
deletes their ``.meta`` and ``.arrow`` objects (ARCHITECTURE.md §11.1, §11.3). A delete
request that fails (a transient error: "a maintenance failure is kept and retried")
must be finished by a later pass of the same process: no object of a removed segment
stays behind, no reader returns its rows, and a MANIFEST rebuilt from a listing later
(after damage) never brings it back.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.config import RetentionConfig
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import id_batch, wal_in

ROOT = "memory://rd/s"
HOUR_NS = 3600 * 10**9


pytestmark = pytest.mark.usefixtures("fresh_memory")


def config(wal: Path) -> StoreConfig:
    return wal_in(wal, retention=RetentionConfig(max_age_hours=1))


def fail_first_segment_delete(objects: MemoryObjects) -> None:
    failed: list[str] = []

    def before(op: str, key: str) -> None:
        if op == "delete" and key.startswith("segments/") and not failed:
            failed.append(key)
            raise OSError(f"injected: {key} delete failed")

    objects.faults.before = before


def segment_keys() -> list[str]:
    # segment objects (a partition's publication hint, §12, is not one)
    objects = MemoryObjects("rd", "s").list("segments/")
    return [o.key for o in objects if "/" in o.key[9:] and not o.key.startswith("segments/~")]


def test_a_later_pass_deletes_the_objects_a_failed_deletion_left(tmp_path: Path) -> None:
    with QuiverStore.open(ROOT, config(tmp_path / "w"), partition="p-0", background=False) as w:
        for i in range(3):
            w.append(id_batch(10 * i, 3))
            w.flush()
            w.finalize()
        later = time.time_ns() + 3 * HOUR_NS  # every segment is past the time window
        assert isinstance(w.objects, MemoryObjects)
        fail_first_segment_delete(w.objects)
        with pytest.raises(OSError, match="injected"):
            w.run_retention(now_ns=later)
        w.run_retention(now_ns=later)
        w.run_retention(now_ns=later)
        assert segment_keys() == []
    with QuiverStore.open(ROOT, config(tmp_path / "r"), partition=None, create=False) as r:
        assert [b for b in r.scan()] == []
