"""A store-wide handle that sealed a dead writer's partition still runs retention on it.

``finalize_idle_partitions`` takes the writer lease of a partition whose writer died,
recovers its WAL, seals what it holds and releases the lease (ARCHITECTURE.md §8.2,
§10.2). Retention changes a partition's MANIFEST at whatever epoch it holds, never
fenced, since it writes no partition (§11.3). So once the partition's next writer took
it (a higher epoch), the handle that sealed for it must still delete what every
subscriber acknowledged there, not fail with ``FencedError`` at every pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscribers import Outcome
from tests.stores import id_batch, wal_in

ROOT = "memory://sealed-idle/s"

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_handle_that_sealed_an_idle_partition_still_runs_retention_on_it(tmp_path: Path):
    wal = tmp_path / "wal"
    driver = QuiverStore.open(ROOT, wal_in(wal), partition=None, background=False)
    driver.subscribers.register("s")
    dead = QuiverStore.open(ROOT, wal_in(wal), partition="p-0", background=False)
    dead.append(id_batch(0))
    dead.flush()
    # the writer's process dies: its lease is renewed no more, its lock is gone
    assert dead.writer is not None and dead.writer.lease is not None
    lease = dead.writer.lease
    assert lease.keeper is not None
    lease.keeper.stop()
    lease._forget()
    dead.writer._flock.release()

    assert [p for p, _ in driver.finalize_idle_partitions()] == ["p-0"]  # sealed: seq 1
    with QuiverStore.open(ROOT, wal_in(wal), partition="p-0", background=False) as w:
        w.append(id_batch(3))
        w.flush()
        assert w.finalize() is not None  # seq 2, at the next writer's epoch
    driver.subscribers.record("s", "p-0", [1, 2], Outcome.ACK)

    result = driver.run_retention()

    assert result.deleted == {"p-0": [1, 2]}
    assert [m.seq for m in driver.segments("p-0")] == []
    driver.close()
