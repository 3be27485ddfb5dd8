"""A damaged ack log never stops a writer's appends (ARCHITECTURE.md §22, ack log row:
"a writer's appends and finalizes go on"), also for a writer on a machine new to an
object root: its ``wal.path`` holds no STATE yet (a new executor, a pod replaced with
an empty disk), and it starts above every seq the partition's MANIFEST records, so
it has no need of the ack log's deletion records to open. One flipped bit in one
ack-log delta must not refuse every new machine of a Spark sink.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.planning import Caps
from tests.stores import id_batch, scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")

ROOT = "memory://damaged-log/s"


def _damage_the_last_ack_log_delta() -> None:
    bucket = MemoryObjects("damaged-log", "s")
    key = [i.key for i in bucket.list("subscribers/log/")][-1]
    got = bucket.get(key)
    assert got is not None
    data = bytearray(got.data)
    data[40] ^= 0xFF  # inside its first record
    bucket.replace(key, bytes(data), version=got.version)


@pytest.mark.parametrize("partition", ["p-0", "p-1"])
def test_a_machine_new_to_the_root_writes_while_the_ack_log_is_damaged(
    tmp_path: Path, partition: str
) -> None:
    with QuiverStore.open(ROOT, wal_in(tmp_path / "old"), partition="p-0", background=False) as w:
        for lo in (0, 3):
            w.append(id_batch(lo, 3))
            assert w.finalize() is not None
    with Subscription.open(ROOT, "c", config=wal_in(tmp_path / "consumer")) as sub:
        sub.start("earliest")
        batch = sub.poll(Caps(max_segments=1))
        assert batch is not None
        sub.ack(batch.end)  # retention deletes the first segment; the second stays
    _damage_the_last_ack_log_delta()
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / "new"), partition=partition, background=False
    ) as w:
        w.append(id_batch(100, 3))
        w.flush()
        assert w.finalize() is not None
        assert scanned_ids(w) == [3, 4, 5, 100, 101, 102]
