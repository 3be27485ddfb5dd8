"""One damaged record of the ack log never makes a writer reuse a seq subscribers
acknowledged, once the partition's MANIFEST was damaged too.

A writer new to an object root (no STATE) reads the ack log's deleted marks, the
one trace of the seqs retention deleted once the MANIFEST was rewritten from a
listing (§11.1, §11.3). When the ack log holds a damaged record, even one about
another subscriber, that read raises, and the writer goes on from the listing alone:
it publishes under seqs already done for every subscriber. The repair §22 names for
the ack log (open with ``salvage=True``, then ``subscribers.checkpoint()``) keeps
every undamaged record, the deletions and acknowledgements of those seqs with them:
the writer's rows, acknowledged to its caller, are then never delivered, and
retention deletes them. A salvaged read of the same log still holds the marks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, scanned_ids, wal_in

ROOT = "memory://damaged-acklog/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def flip(objects: MemoryObjects, key: str, offset: int) -> None:
    got = objects.get(key)
    assert got is not None
    raw = bytearray(got.data)
    raw[offset] ^= 0xFF
    objects.put(key, bytes(raw))


def test_a_damaged_ack_log_record_never_makes_a_writer_reuse_an_acknowledged_seq(
    tmp_path: Path,
) -> None:
    driver = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-d"), partition=None, background=False)
    driver.subscribers.register("s")
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-a"), partition="p-0") as a:
        for lo in (0, 3):
            a.append(id_batch(lo))
            a.flush()
            assert a.finalize() is not None
    driver.subscribers.record("s", "p-0", [1, 2], Outcome.ACK)
    assert driver.run_retention().deleted == {"p-0": [1, 2]}
    driver.subscribers.register("t")  # a later fact, about another subscriber
    driver.close()

    objects = MemoryObjects("damaged-acklog", "s")
    last = [o.key for o in objects.list("subscribers/log/")][-1]
    flip(objects, last, 32 + 8)  # t's registration record (the 32-byte header is intact)
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    flip(objects, "partitions/p-0/MANIFEST", len(manifest.data) // 2)

    # a writer on a machine new to the root: its open rewrites the MANIFEST
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-b"), partition="p-0") as b:
        b.append(id_batch(100))
        b.flush()  # acknowledged
        meta = b.finalize()
    assert meta is not None

    # the ack log's repair (ARCHITECTURE.md §22), then a retention pass
    salvaging = replace(wal_in(tmp_path / "wal-r"), salvage=True)
    with QuiverStore.open(ROOT, salvaging, partition=None, background=False) as r:
        r.subscribers.checkpoint()
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-e"), partition=None, background=False) as e:
        e.run_retention()
        assert scanned_ids(e) == [100, 101, 102]
    assert meta.seq > 2
