"""Helpers for the source tests: stores written by the engine, queries, checkpoints."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.segment import SegmentLocation, SegmentMeta

SCHEMA = "k long, v string, ts timestamp"
ROWS_PER_SEGMENT = 10
TS_BASE_US = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z


def rows_of(start: int, n: int) -> pa.RecordBatch:
    ks = list(range(start, start + n))
    return pa.record_batch(
        {
            "k": pa.array(ks, pa.int64()),
            "v": pa.array([f"value-{k}" for k in ks]),
            # one hour per key: segments get disjoint event-time ranges
            "ts": pa.array([TS_BASE_US + k * 3_600_000_000 for k in ks], pa.timestamp("us", "UTC")),
        }
    )


def write_segments(
    root: str,
    segments: int,
    *,
    partition: str = "p-0",
    first_key: int = 0,
    rows: int = ROWS_PER_SEGMENT,
    event_time: bool = True,
) -> list[SegmentMeta]:
    """``segments`` finalized segments of ``rows`` rows with consecutive keys."""
    config = StoreConfig(segment=SegmentConfig(event_time_column="ts" if event_time else None))
    metas = []
    with QuiverStore.open(root, config, partition=partition, background=False) as store:
        for i in range(segments):
            store.append(rows_of(first_key + i * rows, rows))
            store.flush()
            meta = store.finalize()
            assert meta is not None
            metas.append(meta)
    return metas


def remove_segment_data(root: str, seqs: list[int], partition: str = "p-0") -> None:
    """Delete the ``.arrow`` of each of ``seqs``, leaving its ``.meta`` published.

    How the pruning tests prove that a segment was never opened: planning reads only
    ``.meta`` files, while a read task that opens a segment whose data is gone fails
    the query with a data-loss error naming it.
    """
    loc = SegmentLocation(os.path.join(root, "segments"))
    for seq in seqs:
        os.remove(loc.data_path(partition, seq))


def segment_files(root: str, partition: str = "p-0") -> list[int]:
    """Seqs of the published segments of ``partition`` (by their .meta files)."""
    d = os.path.join(root, "segments", partition)
    if not os.path.isdir(d):
        return []
    return sorted(int(n.split(".")[0]) for n in os.listdir(d) if n.endswith(".meta"))


def stream(spark: Any, root: str, subscriber: str, **options: str) -> Any:
    reader = spark.readStream.format("quiver").option("subscriber", subscriber)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(root)


class Collector:
    """A foreachBatch sink that keeps every micro-batch's rows (survives restarts)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple]] = {}
        self.calls: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.calls.append(batch_id)
        self.batches[batch_id] = sorted(tuple(r) for r in df.collect())

    def keys(self) -> list[int]:
        return sorted(r[0] for rows in self.batches.values() for r in rows)


def run_available_now(df: Any, ckpt: str, sink: Callable[[Any, int], None]) -> Any:
    q = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120), "AvailableNow query did not stop by itself"
    assert q.exception() is None, q.exception()
    return q


def checkpoint_offsets(ckpt: str) -> dict[int, dict[str, int]]:
    """Batch id -> the source's offset (partition -> seq) from ``<ckpt>/offsets``."""
    out = {}
    d = os.path.join(ckpt, "offsets")
    for name in os.listdir(d):
        if name.isdigit():
            with open(os.path.join(d, name)) as f:
                lines = f.read().splitlines()
            out[int(name)] = json.loads(lines[-1])["segments"]
    return out


def committed_batches(ckpt: str) -> list[int]:
    d = os.path.join(ckpt, "commits")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def wait_until(cond: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or cond}")


def registry_hwm(root: str, subscriber: str, partition: str = "p-0") -> int:
    from quiver_spark.subscribers import SubscriberRegistry

    with SubscriberRegistry.open(root) as reg:
        return reg.hwm(subscriber, partition)
