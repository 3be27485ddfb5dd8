"""A damaged staged transaction stays in the bucket until someone repairs or removes
it (ARCHITECTURE.md §10.2: "damaged -> left (fsck problem `staged`)").

Its bytes may hold committed rows that nobody else has: when a lost machine's staged
object fails verification, neither the partition's next writer (which seals what its
WAL lacks and then records a transaction floor above it) nor a later observer pass
takes it for garbage; it is still there for ``quiver fsck`` to name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.staging import staged_key
from tests.lost_machines import APP, Clock, lose, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def rebooted(tmp_path: Path) -> QuiverStore:
    """Machine a reboots with an empty ``wal.path`` and takes its slot's lease again
    once the old one was seen unchanged for its ttl."""
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    for seen in lease_mod._seen.values():  # watched for a ttl (instead of waiting)
        seen.first -= lease_mod.DEFAULT_TTL_S + 1
    return machine(tmp_path, "a", pid=9000, node="node-a-rebooted")


def test_the_next_writer_and_observers_leave_a_damaged_committed_staged_object(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, tmp_path / "wal-a")
    objects = MemoryObjects("lost", "s")
    got = objects.get(staged_key("p-0", t1))
    assert got is not None
    raw = bytearray(got.data)
    raw[-5] ^= 0xFF  # a flipped byte in its rows
    objects.put(staged_key("p-0", t1), bytes(raw))

    back = rebooted(tmp_path)
    assert back.writer is not None
    back.writer.maintain()  # meets the damaged object
    t2 = task(back, 2, 10, 2)
    assert back.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    back.writer.maintain()
    assert back.finalize() is not None  # its own rows: a floor above t1 is recorded
    back.close()
    assert t1 in staged()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()  # the lease was released: at once
    assert scanned_ids(obs) == [10, 11]
    assert t1 in staged()  # still there for fsck, never garbage
