"""A transaction whose staging returned is never lost once its batch commits, even
when its writer was paused and taken over meanwhile (ARCHITECTURE.md §8.2, §10.2).

A write task flushes its rows, then its process pauses (a long GC, a network
partition) past its writer lease's ttl; another machine takes the partition's lease
and opens (recovery lists ``txns/``). The paused task then resumes and stages its
transaction. Either staging refuses (the task fails and Spark runs it again: nothing
of it is committed), or the staged object is the transaction's rows for good: once the
driver commits the batch, whoever seals the partition publishes them. The new
writer's transaction floor never turns them into garbage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError, QuiverError
from tests.lost_machines import APP, Clock, lose, machine, observer, staged, task
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _taken_over_while_a_task_pauses(tmp_path: Path) -> tuple[QuiverStore, QuiverStore, int]:
    """Machine a's task flushed transaction 1 and paused before staging it; machine b
    took the partition over. Returns (paused, next writer, the paused task's txn)."""
    paused = machine(tmp_path, "a")
    t1 = paused.begin_txn(APP, 1)
    paused.append(id_batch(0, 3), txn_id=t1)
    paused.flush()  # durable on its disk; the process pauses before staging
    lose(paused, None, process_dies=False)

    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    for seen in lease_mod._seen.values():  # a's lease watched unchanged for its ttl
        seen.first -= lease_mod.DEFAULT_TTL_S + 1
    nxt = machine(tmp_path, "b")  # takes the partition over
    return paused, nxt, t1


def spark_task(store: QuiverStore, version: int, lo: int, n: int) -> int:
    """A task Spark runs again once when its first attempt fails."""
    try:
        return task(store, version, lo, n)
    except OSError:
        return task(store, version, lo, n)


def test_a_late_staged_committed_transaction_of_a_paused_writer_is_sealed(
    tmp_path: Path,
) -> None:
    paused, nxt, t1 = _taken_over_while_a_task_pauses(tmp_path)
    try:  # the paused task resumes
        paused.stage_txn(t1)
        reported = True
    except (QuiverError, OSError):  # refused: the task fails, nothing of it commits
        reported = False
    if reported:  # the driver commits the batch the task reported
        assert nxt.commit_txn(APP, 1, [("p-0", t1)], rows=3)

    t2 = spark_task(nxt, 2, 10, 2)
    assert nxt.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    assert nxt.writer is not None
    nxt.writer.maintain()
    nxt.finalize()
    nxt.close()
    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()
    obs.finalize_idle_partitions()
    assert scanned_ids(obs) == ([0, 1, 2, 10, 11] if reported else [10, 11])
    assert staged() == []


def test_the_next_writers_task_is_staged_beside_a_late_staged_transaction(
    tmp_path: Path,
) -> None:
    paused, nxt, t1 = _taken_over_while_a_task_pauses(tmp_path)
    try:
        paused.stage_txn(t1)
    except (QuiverError, OSError):
        pass  # refused: the paused task fails
    t2 = nxt.begin_txn(APP, 2)
    nxt.append(id_batch(10, 2), txn_id=t2)
    nxt.flush()
    assert nxt.stage_txn(t2) > 0  # its own id, never the paused writer's
    nxt.close()
