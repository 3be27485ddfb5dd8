"""A transaction whose segment retention removed is never sealed again, however many
transactions retired with it (ARCHITECTURE.md §11.1 `txns_gone`, §10.2).

A writer seals a staged transaction from its WAL and then deletes its staged object;
when that delete fails the object stays behind. Once retention removed the segment,
the rows are gone for good: no later observer pass may publish the leftover staged
object again, even when the segment held more transactions than the MANIFEST keeps
ids of retired transactions.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import RetentionConfig
from quiver_spark.control.manifest import TXNS_GONE_KEEP
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, Clock, machine, observer, staged, task
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_leftover_staged_object_is_never_sealed_after_its_segment_retired_with_many_others(
    tmp_path: Path,
) -> None:
    w = machine(tmp_path, "a", retention=RetentionConfig(max_age_hours=1.0))
    x = task(w, 1, 0, 3)
    assert w.commit_txn(APP, 1, [("p-0", x)], rows=3)
    for v in range(2, 2 + TXNS_GONE_KEEP):  # one small transaction per task
        t = w.begin_txn(APP, v)
        w.append(id_batch(1000 + v, 1), txn_id=t)
        assert w.commit_txn(APP, v, [("p-0", t)], rows=1)
    w.flush()

    def delete_fails(op: str, key: str) -> None:
        if op == "delete" and key.endswith(".txn"):
            raise OSError("503 service unavailable")

    objects = w.objects
    assert isinstance(objects, MemoryObjects)
    objects.faults.before = delete_fails
    assert w.writer is not None
    w.writer.maintain()
    assert w.finalize() is not None
    objects.faults.before = None
    assert staged() == [x]  # left behind by the failed delete
    assert len(scanned_ids(w)) == 3 + TXNS_GONE_KEEP

    w.run_retention(now_ns=time.time_ns() + 2 * 3600 * 10**9)  # the segment ages out
    assert scanned_ids(w) == []
    w.close()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()  # the lease was released: at once
    assert scanned_ids(obs) == []  # retired rows never come back
