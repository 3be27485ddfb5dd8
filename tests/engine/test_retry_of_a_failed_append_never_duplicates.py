"""An append that raised is not published, so retrying it never duplicates a row.

A caller that gets an error from ``append`` (the error says nothing after the
durable seq is durable) retries the same rows. Whatever the writer's next call
recovers from the failed WAL file, every row the caller appended with success is
readable exactly once afterwards: the rows of the failed call never show up beside
their retried copy, in the process that goes on and after a reopen.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import SYNC_EACH, id_batch, reopened_ids

WAL = f"{os.sep}wal{os.sep}"


def test_an_append_whose_fsync_failed_and_that_is_retried_is_readable_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    io.fail("fsync", 1, errno.EIO, path_contains=WAL)
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
    store.append(id_batch(100))  # the caller retries what it was told is not durable
    store.flush()
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 100, 101, 102]


def test_a_table_append_that_failed_midway_and_is_retried_is_readable_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    table = pa.Table.from_batches([id_batch(10), id_batch(20)])
    io.fail("write", 2, errno.ENOSPC, path_contains=WAL)  # the table's second batch
    with pytest.raises(WalFailedError):
        store.append(table)
    store.append(table)  # the call failed: the caller appends the whole table again
    store.flush()
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
