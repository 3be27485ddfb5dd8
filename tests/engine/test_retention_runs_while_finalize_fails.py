"""A full disk that retention could free heals: a failing finalize never skips the pass.

When the disk is full, a writer's maintenance tick cannot seal its open segment; the
same tick's retention pass is what frees space (segments every subscriber
acknowledged, data past ``retention.max_age``). The tick keeps the finalize failure
as ``maintenance_error`` and still runs the pass, so the condition can clear by itself
instead of wedging the partition until another process reclaims space.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.subscribers import Outcome
from tests.faults import FaultyIO
from tests.stores import int_segments

SMALL = StoreConfig(
    wal=WalConfig(flush_interval_s=0),
    segment=SegmentConfig(max_open_duration_s=3600, target_size_bytes=64),
)


def test_a_tick_whose_finalize_hits_a_full_disk_still_reclaims_acknowledged_segments(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    int_segments(root, [(0, 3), (3, 3)])
    io = FaultyIO()
    store = QuiverStore.open(root, SMALL, io=io, background=False)
    store.subscribers.register("c")
    store.subscribers.record("c", "p-0", [1, 2], Outcome.ACK)
    full = io.fail("open", 1, errno.ENOSPC, sticky=True, path_contains=".arrow")
    store.append(pa.record_batch({"k": pa.array(range(100, 120), type=pa.int64())}))
    with pytest.raises(OSError) as failed:  # raised after the pass, which still ran
        store.maintain()
    assert failed.value.errno == errno.ENOSPC
    assert full.fired
    seg_dir = os.path.join(root, "segments", "p-0")
    left = sorted(n for n in os.listdir(seg_dir) if n.endswith(".meta"))
    assert left == [], f"acknowledged segments kept while the disk is full: {left}"
    io.faults.remove(full)
    store.close()
