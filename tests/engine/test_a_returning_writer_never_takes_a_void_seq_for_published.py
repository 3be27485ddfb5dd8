"""A machine that returns after a successor's seal was interrupted loses no committed
row (ARCHITECTURE.md §11.3, §10.2).

A writer that died between its `.meta` and its manifest step leaves a segment its
STATE names as `publishing`. A successor sealing the machine's committed staged
transaction finds that `.meta`, records the seq void and moves to the next seq; if
it is stopped there (a failed request, or it dies) and the machine returns before the
next observer pass, the returning writer's recovery must not take its segment for
published: its rows (and the staged object still holding them) must stay reachable,
and the partition must end up holding every committed row exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import (
    APP,
    Clock,
    dies_at_its_manifest_step,
    lose,
    machine,
    observer,
    seal_after_expiry,
    task,
)
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_writer_returning_after_a_seal_stopped_past_its_void_step_keeps_its_committed_rows(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    dies_at_its_manifest_step(lost)  # .arrow, STATE, .meta of seq 1; no manifest step
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)

    def unavailable(op: str, key: str) -> None:
        if op == "create" and key.endswith("00000000000000000002.arrow"):
            raise OSError("503 service unavailable")

    obs_objects = obs.objects
    assert isinstance(obs_objects, MemoryObjects)
    obs_objects.faults.before = unavailable
    assert seal_after_expiry(obs, clock) == []  # seq 1 made void, then seq 2 failed
    assert "p-0" in obs.idle_failures
    obs_objects.faults.before = None

    back = machine(tmp_path, "a")  # returns with its WAL before the next pass
    back.close()
    obs.finalize_idle_partitions()
    assert scanned_ids(obs) == [0, 1, 2]
