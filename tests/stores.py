"""Stores filled through the engine for tests: finalized segments of consecutive integers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.segment import SegmentMeta

HAND_SEALED = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
"""Segments are finalized by the test, never by age."""


def int_segments(
    root: str | Path,
    segments: Iterable[tuple[int, int]],
    *,
    partition: str = "p-0",
    column: str = "k",
    config: StoreConfig = HAND_SEALED,
) -> list[SegmentMeta]:
    """One finalized segment of ``partition`` per ``(lo, n)``: an int64 ``column``
    holding ``lo .. lo + n - 1``. Returns their metadata in order."""
    metas = []
    with QuiverStore.open(str(root), config, partition=partition, background=False) as store:
        for lo, n in segments:
            store.append(pa.record_batch({column: pa.array(range(lo, lo + n), type=pa.int64())}))
            meta = store.finalize()
            assert meta is not None
            metas.append(meta)
    return metas


def publish(store: QuiverStore, n: int = 1) -> None:
    """Append three rows and finalize, ``n`` times, through an open writer: ``n`` new
    segments of its partition."""
    for _ in range(n):
        store.append(pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())}))
        store.finalize()
