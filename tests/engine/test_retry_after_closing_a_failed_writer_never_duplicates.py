"""A call that raised is never read back, even when the store is closed right after it.

The usual shape of a caller: ``with QuiverStore.open(...) as store: store.append(x)``;
the append raises (its WAL fsync failed, the error says nothing after the durable seq
is durable), the ``with`` block closes the store, and the caller's retry loop opens the
store again (in the same process or in a new one) and appends ``x`` again. Closing is
not a crash: the rows of the call that raised must never show up beside their retry.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import WalFailedError
from tests.child import run_python
from tests.faults import FaultyIO
from tests.stores import SYNC_EACH, id_batch, reopened_ids

WAL = f"{os.sep}wal{os.sep}"


def test_an_append_that_raised_then_closed_and_retried_after_reopening_is_read_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    with QuiverStore.open(root, SYNC_EACH, io=io, background=False) as store:
        store.append(id_batch(0))
        io.fail("fsync", 1, errno.EIO, path_contains=WAL)
        with pytest.raises(WalFailedError):
            store.append(id_batch(100))
    with QuiverStore.open(root, SYNC_EACH, background=False) as store:
        store.append(id_batch(100))  # the retry of the call that raised
        store.flush()
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 100, 101, 102]


def test_a_process_whose_append_raised_exits_and_the_next_process_retries_once(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    run_python(
        """
import errno
import pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO

cfg = StoreConfig(wal=WalConfig(flush_interval_s=0), segment=SegmentConfig(max_open_duration_s=3600))
def batch(lo):
    return pa.record_batch({"id": pa.array(range(lo, lo + 3), type=pa.int64())})
io = FaultyIO()
try:
    with QuiverStore.open(root, cfg, io=io, background=False) as store:
        store.append(batch(0))
        io.fail("fsync", 1, errno.EIO, path_contains="/wal/")
        store.append(batch(100))
except WalFailedError:
    pass  # not acknowledged: the next run retries it
else:
    raise SystemExit("the append did not raise")
""",
        root=root,
    )
    run_python(
        """
import pyarrow as pa
from quiver_spark import QuiverStore
with QuiverStore.open(root, background=False) as store:
    store.append(pa.record_batch({"id": pa.array([100, 101, 102], type=pa.int64())}))
    store.flush()
""",
        root=root,
    )
    assert reopened_ids(root, SYNC_EACH) == [0, 1, 2, 100, 101, 102]
