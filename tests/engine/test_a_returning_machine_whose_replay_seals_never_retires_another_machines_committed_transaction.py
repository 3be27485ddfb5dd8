"""A machine that returns to its partition with its disk, and whose replay seals a
segment (its WAL holds more than ``segment.target_size``), never retires the committed
staged transaction another machine wrote meanwhile and lost with its disk.

Machine a writes plain appends and loses its lease (its disk kept). Machine b takes the
partition over, stages a transaction, the driver commits it, and b is lost with its
disk: only b's staged object holds those rows. When a comes back, its recovery replays
its WAL; a segment sealed during that replay records the partition's ``txn_floor``
(ARCHITECTURE.md §10.2). The floor must stay below b's transaction, which nobody has
sealed yet: a floor over it makes its staged object garbage and its committed rows are
lost. The writer takes b's transaction for foreign before it replays anything, and
seals it once recovery is done.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError
from tests.lost_machines import APP, ROOT, lose, machine, task
from tests.stores import id_batch, scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")

TTL = 0.3


def test_a_replay_that_seals_never_retires_a_lost_machines_committed_transaction(
    tmp_path: Path,
) -> None:
    a = machine(tmp_path, "a", lease_ttl_s=TTL)
    for i in range(5):
        a.append(id_batch(100 * i, 100))
    a.flush()
    lose(a, None, process_dies=True)  # a's disk is kept
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b", lease_ttl_s=TTL)
    time.sleep(TTL + 0.1)
    b = machine(tmp_path, "b", lease_ttl_s=TTL)
    txn = task(b, 1, 5000, 3)
    assert b.commit_txn(APP, 1, [("p-0", txn)], rows=3)
    lose(b, tmp_path / "wal-b")  # b's disk is lost: only its staged object holds the rows
    time.sleep(TTL + 0.1)

    cfg = wal_in(tmp_path / "wal-a", lease_ttl_s=TTL)
    cfg = replace(cfg, segment=replace(cfg.segment, target_size_bytes=1500))  # replay seals
    ident = lease_mod._Identity("host-a", 4001, 1, "node-a")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        with pytest.raises(LeaseHeldError):
            QuiverStore.open(ROOT, cfg, partition="p-0", background=False)
        time.sleep(TTL + 0.1)
        back = QuiverStore.open(ROOT, cfg, partition="p-0", background=False)
    assert back.writer is not None
    back.finalize()
    back.writer.maintain()
    back.finalize()
    ids = scanned_ids(back)
    back.close()
    assert [i for i in ids if i >= 5000] == [5000, 5001, 5002], "committed rows lost"
    assert sorted(i for i in ids if i < 5000) == sorted(
        k for i in range(5) for k in range(100 * i, 100 * i + 100)
    )
