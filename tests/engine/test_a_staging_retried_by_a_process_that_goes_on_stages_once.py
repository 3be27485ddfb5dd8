"""A transaction whose staging raised is staged by the same process calling
``stage_txn`` again, once (ARCHITECTURE.md §10.2, §9.4): after a lost create
response, after the writer recovered its partition in place from a failed WAL write
(a failed write is not a crash), after a reopen of the store in the same process,
with the same rows handed over in other batches, and when two threads stage it at
once. The retry never finds its own transaction's object refused as another's.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from quiver_spark.objects.memory import MemoryObjects
from tests.faults import FaultyIO
from tests.lost_machines import APP, ROOT, staged
from tests.stores import id_batch, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _open(tmp_path: Path, io: FaultyIO | None = None) -> QuiverStore:
    kw = {} if io is None else {"io": io}
    return QuiverStore.open(ROOT, wal_in(tmp_path / "wal"), background=False, **kw)


def _lose_every_create_response(store: QuiverStore) -> None:
    """The first create of a staged object lands and its response is lost; every
    later one meets a transient error: the staging call raises."""
    objects = store.objects
    assert isinstance(objects, MemoryObjects)
    landed: list[str] = []

    def refused(op: str, key: str) -> None:
        if op == "create" and key.endswith(".txn") and landed:
            raise OSError("response lost")

    def lost(op: str, key: str) -> None:
        if op == "create" and key.endswith(".txn"):
            landed.append(key)
            raise OSError("response lost")

    objects.faults.before = refused
    objects.faults.after = lost


def _responses_back(store: QuiverStore) -> None:
    objects = store.objects
    assert isinstance(objects, MemoryObjects)
    objects.faults.before = None
    objects.faults.after = None


def _flushed_txn(store: QuiverStore) -> int:
    txn = store.begin_txn(APP, 1)
    store.append(id_batch(0, 3), txn_id=txn)
    store.flush()
    return txn


def _staging_failed_after_its_object_landed(store: QuiverStore, txn: int) -> None:
    _lose_every_create_response(store)
    with pytest.raises(OSError, match="response lost"):
        store.stage_txn(txn)
    _responses_back(store)


def test_a_staging_retried_after_its_responses_were_lost_stages_once(tmp_path: Path) -> None:
    store = _open(tmp_path)
    txn = _flushed_txn(store)
    _staging_failed_after_its_object_landed(store, txn)
    assert store.stage_txn(txn) > 0
    assert staged() == [txn]
    store.close()


def test_a_staging_retried_after_the_writer_recovered_from_a_failed_wal_write_stages_once(
    tmp_path: Path,
) -> None:
    io = FaultyIO()
    store = _open(tmp_path, io)
    txn = _flushed_txn(store)
    _staging_failed_after_its_object_landed(store, txn)
    # another task's append meets a full disk: the writer recovers in place
    io.fail("write", 1, errno.ENOSPC, path_contains=f"{os.sep}wal", partial=True)
    with pytest.raises(WalFailedError):
        store.append(id_batch(100, 2))
    store.append(id_batch(200, 1))  # space is back, the process goes on
    assert store.stage_txn(txn) > 0  # the transaction is still pending: it stages
    assert staged() == [txn]
    store.close()


def test_a_staging_retried_after_a_reopen_in_the_same_process_stages_once(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    txn = _flushed_txn(store)
    _staging_failed_after_its_object_landed(store, txn)
    store.close()
    again = _open(tmp_path)
    assert again.writer is not None
    assert txn in [t for t, *_ in again.writer.pending_txns()]
    assert again.stage_txn(txn) > 0
    assert staged() == [txn]
    again.close()


def test_a_staging_retried_with_the_same_rows_in_other_batches_stages_once(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    txn = store.begin_txn(APP, 1)
    store.append(id_batch(0, 2), txn_id=txn)
    store.append(id_batch(2, 2), txn_id=txn)
    store.flush()
    _staging_failed_after_its_object_landed(store, txn)
    rows = pa.Table.from_batches([id_batch(0, 2), id_batch(2, 2)]).combine_chunks()
    assert store.stage_txn(txn, rows.to_batches()) > 0
    assert staged() == [txn]
    store.close()


def test_two_threads_staging_one_transaction_both_stage_it(tmp_path: Path) -> None:
    store = _open(tmp_path)
    txn = _flushed_txn(store)
    go = threading.Barrier(2)
    got: list[object] = []

    def stage() -> None:
        go.wait()
        try:
            got.append(store.stage_txn(txn))
        except Exception as e:  # reported below
            got.append(e)

    threads = [threading.Thread(target=stage) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(n, int) and n > 0 for n in got), got
    assert staged() == [txn]
    store.close()
