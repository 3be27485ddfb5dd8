"""A recovery that fails after the WAL cut never brings back the call that raised.

After a failed WAL fsync, the writer's next call cuts the failed file before the
records of the call that raised and writes again only what calls that returned wrote
(ARCHITECTURE.md §9.4). If the rest of that recovery then fails (a read of STATE, a
listing: the disk is still unwell), the call after it tries again. That second
attempt must keep the same cut: the caller was told the call failed and retries it,
so its rows are readable exactly once, in the process that goes on and after a reopen.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO
from tests.stores import SYNC_EACH, id_batch, reopened_ids, scanned_ids


def test_a_retry_after_a_recovery_that_failed_reading_state_is_read_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(0))
    io.fail("fsync", 1, errno.EIO, path_contains=f"{os.sep}wal{os.sep}")
    with pytest.raises(WalFailedError):
        store.append(id_batch(100))
    # the retry's recovery cuts the WAL (reading STATE once), then fails re-reading it
    io.fail("read", 2, errno.EIO, path_contains="STATE")
    with pytest.raises(OSError):
        store.append(id_batch(100))
    store.append(id_batch(100))  # the caller retries again; the disk answers now
    store.flush()
    store.finalize()
    assert scanned_ids(store) == [0, 1, 2, 100, 101, 102]
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 100, 101, 102]
