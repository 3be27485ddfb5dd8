"""A machine that returns with its disk never seals again a transaction an observer
sealed for it, however long it was away (ARCHITECTURE.md §10.2).

The machine is lost with its WAL intact; an observer seals its committed staged
transaction; the partition's next writer goes on and retention removes old segments,
many transactions with them; then the machine comes back and recovers its WAL, which
still holds the transaction. Its rows were delivered and retired: they are never
published again, whatever number of transactions retired since.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import RetentionConfig
from quiver_spark.control.manifest import TXNS_GONE_KEEP
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry, task
from tests.stores import id_batch, scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")

AGE = RetentionConfig(max_age_hours=1.0)


def test_a_returning_machine_never_reseals_what_an_observer_sealed_and_retention_retired(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a", retention=AGE)
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1, 2]

    # the slot's writer runs on another machine meanwhile (the sealer released the
    # lease), one small transaction per task
    nxt = machine(tmp_path, "b", retention=AGE)
    for v in range(2, 2 + TXNS_GONE_KEEP):
        t = nxt.begin_txn(APP, v)
        nxt.append(id_batch(1000 + v, 1), txn_id=t)
        assert nxt.commit_txn(APP, v, [("p-0", t)], rows=1)
    nxt.flush()
    assert nxt.writer is not None
    nxt.writer.maintain()
    assert nxt.finalize() is not None
    nxt.run_retention(now_ns=time.time_ns() + 2 * 3600 * 10**9)  # everything ages out
    assert scanned_ids(nxt) == []
    nxt.close()

    back = machine(tmp_path, "a", retention=AGE)  # its WAL still holds t1
    back.finalize()
    back.close()
    assert scanned_ids(obs) == []  # retired rows never come back
