"""A process whose WAL fsync fails retries the call that raised and goes on; a new
process then reads every acknowledged row exactly once.

The caller's rule: a call that raised is not acknowledged and is retried whole (a
failed ``flush`` is retried as a flush, a failed ``append`` as the same append). The
writer process keeps going without a reopen and dies without closing; the next
process recovers the WAL and finds each acknowledged row once, none twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.child import ids_read_by_a_new_process, run_python

WRITER = """
import errno, os
import pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.errors import WalFailedError
from tests.faults import FaultyIO

config = StoreConfig(
    wal=WalConfig(flush_interval_s=interval), segment=SegmentConfig(max_open_duration_s=3600)
)
def batch(lo):
    return pa.record_batch({"id": pa.array(range(lo, lo + 3), type=pa.int64())})

io = FaultyIO()
store = QuiverStore.open(root, config, io=io, background=False)
store.append(batch(0))
store.flush()
io.fail("fsync", 1, errno.EIO, path_contains=os.sep + "wal" + os.sep)
try:
    store.append(batch(10))
    store.flush()
    raise SystemExit("the fsync did not fail")
except WalFailedError:
    pass
if interval:  # the append returned: the flush is what raised, retried as a flush
    store.flush()
else:  # the append raised: retried as the same append
    store.append(batch(10))
store.append(batch(20))
store.flush()
os._exit(0)  # dies holding the partition: no close, no finalize
"""


@pytest.mark.parametrize("interval", [0, 3600], ids=["fsync-per-append", "flush-by-caller"])
def test_a_new_process_reads_each_acknowledged_row_once_after_a_failed_fsync_was_retried(
    tmp_path: Path, interval: float
) -> None:
    root = str(tmp_path / "s")
    run_python(WRITER, root=root, interval=interval)
    assert ids_read_by_a_new_process(root) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
