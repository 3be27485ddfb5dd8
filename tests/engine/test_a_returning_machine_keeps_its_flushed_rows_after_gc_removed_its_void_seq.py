"""A machine that stopped between its segment's commit point (STATE naming it) and the
MANIFEST step, whose successor then passed over that seq (recorded void, §11.3), comes
back with its WAL: the rows it flushed are sealed again, whatever ``quiver gc --full``
removed meanwhile. gc removes the objects of a void seq as orphans (§16.2); the
returning writer must then rebuild the segment from its WAL, never take it for one
retention deleted: no subscriber acknowledged it and the ack log records no deletion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.gc import run_gc
from quiver_spark.errors import LeaseHeldError
from tests.lost_machines import ROOT, dies_at_its_manifest_step, lose, machine
from tests.stores import id_batch, scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_flushed_rows_of_a_void_seq_that_gc_removed_come_back_with_their_machine(
    tmp_path: Path,
) -> None:
    a = machine(tmp_path, "a", lease_ttl_s=0.3)
    a.append(id_batch(0, 3))
    a.flush()  # durable: acknowledged to the caller
    dies_at_its_manifest_step(a)  # .arrow, STATE and .meta written; not in the MANIFEST
    lose(a, None)  # the process is gone, its disk (the WAL) stays
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b", lease_ttl_s=0.3)
    time.sleep(0.4)
    b = machine(tmp_path, "b", lease_ttl_s=0.3)
    b.append(id_batch(10, 2))
    b.flush()
    assert b.finalize() is not None  # its publication records a's seq void
    b.close()
    gc_handle = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-gc"), partition=None)
    doc = run_gc(gc_handle, dry_run=False, full=True)
    gc_handle.close()
    assert [o["seq"] for o in doc["orphans"]] == [1]  # a's void seq, removed as an orphan
    back = machine(tmp_path, "a", lease_ttl_s=0.3)  # the machine returns with its WAL
    back.finalize()
    assert scanned_ids(back) == [0, 1, 2, 10, 11]
    back.close()
