"""A machine that returns with its disk never seals again a transaction an observer
sealed for it and retention deleted, even after the partition's MANIFEST was damaged
and rewritten from a listing (ARCHITECTURE.md §11.1, §10.2).

The machine is lost with its WAL intact; an observer seals its committed staged
transaction from the staged object; a subscriber reads and acknowledges the segment
and retention deletes it (its staged object is gone too). Then the MANIFEST is
damaged: the machine's writer, back with its disk, rewrites it from a listing at its
open, where neither the segment nor a ``txns_gone`` or ``txn_floor`` is left to name
the transaction. Its WAL still holds the transaction as committed and unsealed: the
writer must not take it for one nobody sealed, or rows a subscriber already read
(and retention deleted) are published again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_returning_machine_never_reseals_a_retired_transaction_after_a_manifest_rebuild(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)
    obs.subscribers.register("s")
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1, 2]
    [seq] = [m.seq for m in obs.segments("p-0")]
    obs.subscribers.record("s", "p-0", [seq], Outcome.ACK)  # read and acknowledged
    assert obs.run_retention().deleted == {"p-0": [seq]}

    objects = MemoryObjects("lost", "s")
    assert [o.key for o in objects.list("partitions/p-0/txns/")] == []
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    back = machine(tmp_path, "a")  # its WAL still holds t1; its open rewrites the MANIFEST
    assert back.writer is not None
    back.writer.maintain()
    back.finalize()
    back.close()
    assert scanned_ids(obs) == []  # rows read and retired never come back
    obs.close()
