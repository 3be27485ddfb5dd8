"""A WAL file whose write or fsync failed is never read past its last acknowledged seq.

After the failure the writer's next call records the cut in STATE (``wal_limit``)
before anything else, and a new WAL file starts right after it. Every reader (the
writer's recovery in any later process, ``quiver fsck``, ``quiver gc``) stops there:
the records of the call that raised, still in the failed file, are never read, so a
retried append is readable once at every crash point, fsck finds the files
contiguous and gc counts each unsealed record once.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.gc import unfinalized_records
from quiver_spark.errors import WalFailedError
from quiver_spark.fsck import check_store
from tests.faults import CrashSimulator, FaultyIO
from tests.stores import SYNC_EACH, id_batch, reopened_ids

WAL = f"{os.sep}wal{os.sep}"


def test_a_retried_append_is_never_read_twice_at_any_crash_point(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, SYNC_EACH, background=False) as store:
        store.append(id_batch(0))
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(10))
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
    store.append(id_batch(100))
    acked = len(io.trace)  # the retry returned: it is durable
    store.append(id_batch(200))
    store.close()
    states = sim.states(io.trace)
    assert len(states) > 20
    for n, state in enumerate(states):
        ids = reopened_ids(state.materialize(tmp_path / f"c{n}"), SYNC_EACH)
        assert len(ids) == len(set(ids)), (state.point, state.kind, state.detail, ids)
        assert {0, 1, 2}.issubset(ids)
        if state.point >= acked:
            assert {10, 11, 12, 100, 101, 102}.issubset(ids), (state.point, state.kind, ids)


def _store_with_a_cut_file(root: str) -> QuiverStore:
    """A store whose first WAL file (kept by an undecided transaction) holds the
    record of an append that raised after its cut."""
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    txn = store.begin_txn("app", 1)
    store.append(id_batch(0), txn_id=txn)
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
    store.append(id_batch(100))
    return store


def test_fsck_finds_a_cut_file_and_the_file_after_it_contiguous(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = _store_with_a_cut_file(root)
    try:
        wal_dir = os.path.join(root, "partitions", "p-0", "wal")
        assert len(os.listdir(wal_dir)) == 2
        report = check_store(store)
        assert report.problems == [], [f.line() for f in report.problems]
        assert report.checked["wal_files"] == 2
    finally:
        store.close()


def test_gc_counts_each_unsealed_record_once_across_a_cut_file(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = _store_with_a_cut_file(root)
    store.writer.close(finalize=False)  # the transaction stays undecided, the files stay
    store.close()
    with QuiverStore.open(root, SYNC_EACH, background=False, partition=None) as reader:
        # the transaction's batch and the retried append; not the append that raised
        assert unfinalized_records(reader, "p-0") == 2


def test_a_new_process_reads_a_cut_file_only_up_to_its_cut(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = _store_with_a_cut_file(root)
    store.commit_txn("app", 1, [("p-0", 1)])
    store.writer.close(finalize=False)
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 100, 101, 102]
