"""A paused writer whose staging is refused never removes the staged transaction of
the writer that took its partition over (ARCHITECTURE.md §8.2, §10.2).

A Spark task flushes its rows and its process pauses past its writer lease's ttl;
Spark runs the task again on another machine, which takes the partition over, stages
the same rows under its own transaction and reports it; the driver commits the batch.
The paused task then resumes and stages: its lease is gone, so staging refuses and
removes what it staged. Whatever lies under the key was not staged by it, so the
successor's committed transaction is still there: losing the successor's machine
loses none of its rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError, QuiverError
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry, staged
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_paused_task_resuming_leaves_the_rerun_tasks_committed_rows_sealable(
    tmp_path: Path,
) -> None:
    paused = machine(tmp_path, "a")
    t1 = paused.begin_txn(APP, 1)
    paused.append(id_batch(0, 3), txn_id=t1)
    paused.flush()  # durable on a's disk; the process pauses before staging
    lose(paused, None, process_dies=False)

    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    for seen in lease_mod._seen.values():  # a's lease watched unchanged for its ttl
        seen.first -= lease_mod.DEFAULT_TTL_S + 1
    rerun = machine(tmp_path, "b")  # Spark runs the task again on machine b
    t2 = rerun.begin_txn(APP, 1)
    rerun.append(id_batch(0, 3), txn_id=t2)
    rerun.flush()
    assert rerun.stage_txn(t2) > 0
    assert rerun.commit_txn(APP, 1, [("p-0", t2)], rows=3)  # the driver commits b's
    assert staged() == [t2]

    with pytest.raises((QuiverError, OSError)):  # the paused task resumes: refused
        paused.stage_txn(t1)
    assert staged() == [t2]  # b's committed transaction is still staged

    lose(rerun, tmp_path / "wal-b")  # b's machine is lost before it seals
    clock = Clock()
    obs = observer(tmp_path, clock)
    seal_after_expiry(obs, clock)
    assert scanned_ids(obs) == [0, 1, 2]
