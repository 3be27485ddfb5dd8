"""A machine that comes back with a new disk does not hold back the committed rows it
lost (ARCHITECTURE.md §10.2).

A committed transaction staged by a machine that was then lost (with its WAL) must
become readable once its writer lease is free plus the next observer pass. When the
machine reboots with an empty `wal.path` and its writer takes the partition's lease
again (the same slot), that writer's WAL no longer holds the transaction, so it must
not keep the rows unreadable for as long as it holds the lease: they are readable at
the latest once the new writer has sealed its own later rows.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark.errors import LeaseHeldError
from tests.lost_machines import APP, lose, machine, observer, staged, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_committed_rows_lost_with_a_disk_are_readable_while_the_rebooted_machine_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = machine(tmp_path, "a", lease_ttl_s=0.5)
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, tmp_path / "wal-a")  # disk gone

    # the machine reboots (new boot id, new pid, empty wal.path) and claims its slot
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    time.sleep(0.6)  # the old lease seen unchanged for its ttl
    back = machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    assert back.writer is not None
    assert staged() == [t1]

    obs = observer(tmp_path)
    t2 = task(back, 2, 10, 2)
    assert back.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    back.writer.maintain()
    assert back.finalize() is not None  # its own later rows are sealed and readable
    for _ in range(2):  # the driver's passes, a lease ttl apart
        obs.finalize_idle_partitions()
        time.sleep(0.6)
    assert scanned_ids(obs) == [0, 1, 2, 10, 11]
    back.close()
