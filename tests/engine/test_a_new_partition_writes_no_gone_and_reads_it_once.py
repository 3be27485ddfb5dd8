"""A writer's first open of a new partition on an object root reads the partition's
GONE at most once and writes none: nothing of the partition is gone yet.

``partitions/<pid>/GONE`` keeps a second copy of what a listing cannot tell (the
seqs gone, ``high``, the transactions retired), written after every MANIFEST change
that records a seq gone or a transaction retired (ARCHITECTURE.md §11.3). A MANIFEST
made from a listing joins it first (one GET). The first open of a partition makes its
MANIFEST from an empty listing, and is then followed by a second GET of the same
GONE and the create of a GONE that records nothing: three requests per new partition
(every partition of a new store, every new partition a Spark job writes) where one
read is all a listing-built MANIFEST needs, and a read repeated within one call.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import quiver_spark.store as store_module
from quiver_spark import QuiverStore
from quiver_spark.objects import ObjectStore
from quiver_spark.objects.memory import MemoryObjects
from tests.stores import id_batch, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_first_open_and_publication_ask_for_gone_once_and_write_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: Counter[str] = Counter()
    real = store_module.open_objects

    def counting(*args: object, **kwargs: object) -> ObjectStore:
        objects = real(*args, **kwargs)  # type: ignore[arg-type]
        assert isinstance(objects, MemoryObjects)

        def count(op: str, key: str) -> None:
            if key == "partitions/p-0/GONE":
                asked[op] += 1

        objects.faults.before = count
        return objects

    monkeypatch.setattr(store_module, "open_objects", counting)
    with QuiverStore.open(
        "memory://new-partition/s", wal_in(tmp_path / "wal"), partition="p-0", background=False
    ) as w:
        w.append(id_batch(0))
        w.flush()
        assert w.finalize() is not None

    assert asked["get"] <= 1, f"GONE read {asked['get']} times"
    assert asked["create"] + asked["replace"] + asked["put"] == 0, "a GONE recording nothing"
    assert MemoryObjects("new-partition", "s").get("partitions/p-0/GONE") is None
