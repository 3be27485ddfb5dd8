"""Helpers for the sink tests: input files, reading a store back, waiting for visibility."""

from __future__ import annotations

import collections
import os
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from quiver_spark import QuiverStore

INPUT_SCHEMA = "k long, v string, ts timestamp"

# small segments and a short seal delay keep the tests fast
FAST = {"segment.max_open_duration": "300ms", "wal.flush_interval": "10ms"}


def write_input_files(directory: str, files: int, rows: int, start: int = 0) -> list[int]:
    """``files`` Parquet files of ``rows`` rows each with unique keys; returns the keys."""
    os.makedirs(directory, exist_ok=True)
    keys: list[int] = []
    for i in range(files):
        ks = list(range(start + i * rows, start + (i + 1) * rows))
        table = pa.table(
            {
                "k": pa.array(ks, pa.int64()),
                "v": pa.array([f"value-{k}" for k in ks]),
                "ts": pa.array([1_700_000_000_000_000 + k for k in ks], pa.timestamp("us", "UTC")),
            }
        )
        pq.write_table(table, os.path.join(directory, f"part-{start + i:05d}.parquet"))
        keys.extend(ks)
    return keys


def read_store(root: str, **options: Any) -> pa.Table:
    """Every row in the store's finalized segments (sealing orphaned slots first)."""
    from quiver_spark.spark.options import store_config

    config = store_config({"path": root, **options})
    store = QuiverStore.open(root, config, partition=None, create=False)
    try:
        store.finalize_idle_partitions()
        batches = list(store.scan())
        schema = store.schema()
    finally:
        store.close()
    assert schema is not None, f"store {root} has no schema: nothing was ever written"
    return pa.Table.from_batches(batches, schema=schema)


def wait_for_rows(root: str, expected: int, timeout_s: float = 60.0, **options: Any) -> pa.Table:
    """Poll until the store shows ``expected`` rows, then re-read once to catch late extras."""
    deadline = time.monotonic() + timeout_s
    table = None
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(root, "STORE")):
            table = read_store(root, **options)
            if table.num_rows >= expected:
                break
        time.sleep(0.2)
    time.sleep(1.0)  # a late duplicate would appear within a few seal periods
    table = read_store(root, **options)
    return table


def key_counts(table: pa.Table, column: str = "k") -> collections.Counter[int]:
    return collections.Counter(table.column(column).to_pylist())


def assert_exactly_once(table: pa.Table, keys: list[int], column: str = "k") -> None:
    """Every key once: the same set of keys, and no count above one."""
    counts = key_counts(table, column)
    dupes = {k: n for k, n in counts.items() if n != 1}
    missing = set(keys) - set(counts)
    extra = set(counts) - set(keys)
    assert not dupes, f"{len(dupes)} duplicated keys, e.g. {sorted(dupes.items())[:5]}"
    assert not missing, f"{len(missing)} keys lost, e.g. {sorted(missing)[:5]}"
    assert not extra, f"{len(extra)} unexpected keys, e.g. {sorted(extra)[:5]}"
    assert table.num_rows == len(keys)
