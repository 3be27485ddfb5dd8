"""Data shared by the engine benchmarks: distinct 10k-row batches of a fixed schema."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

ROWS = 10_000


def distinct_batches(k: int = 8) -> list[pa.RecordBatch]:
    """``k`` distinct 10k-row batches (int64, float64, timestamp, ~45-byte string)."""
    base = dt.datetime(2026, 1, 1)
    out = []
    for j in range(k):
        ids = range(j * ROWS, (j + 1) * ROWS)
        out.append(
            pa.record_batch(
                {
                    "id": pa.array(ids, pa.int64()),
                    "value": pa.array([i * 0.25 for i in ids], pa.float64()),
                    "ts": pa.array(
                        [base + dt.timedelta(microseconds=i) for i in ids], pa.timestamp("us")
                    ),
                    "text": pa.array([f"event-{i:012d}-" + "x" * 32 for i in ids]),
                }
            )
        )
    return out
