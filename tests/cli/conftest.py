"""Stores built with the engine for the CLI tests, and ways to run the CLI."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.cli import cli
from quiver_spark.subscribers import Outcome, SubscriberRegistry

from ..child import run_python
from ..damage import flip_byte

__all__ = ["flip_byte"]  # re-exported for the CLI tests

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=600))
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def batch(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(lo, lo + n), type=pa.int64()),
            "name": pa.array([f"n{i}" for i in range(lo, lo + n)]),
        }
    )


def write_segments(root: Path, partition: str, count: int, rows: int = 100) -> list[Any]:
    """Append and finalize ``count`` segments of ``rows`` rows into ``partition``."""
    metas = []
    with QuiverStore.open(str(root), CFG, partition=partition, background=False) as store:
        for i in range(count):
            store.append(batch(i * rows, rows))
            metas.append(store.finalize())
    return metas


@dataclass
class Built:
    """A store with partitions p-0 and p-1 (3 segments each) and two subscribers.

    ``fast`` acked everything; ``slow`` acked p-0 seqs 1 and 3 (hwm 1, gap {3}) and
    nothing of p-1.
    """

    root: Path
    metas: dict[str, list[Any]]


@pytest.fixture
def built(tmp_path: Path) -> Built:
    root = tmp_path / "store"
    metas = {p: write_segments(root, p, 3) for p in ("p-0", "p-1")}
    with SubscriberRegistry.open(str(root)) as reg:
        reg.register("fast")
        reg.register("slow")
        reg.record("fast", "p-0", [1, 2, 3], Outcome.ACK)
        reg.record("fast", "p-1", [1, 2, 3], Outcome.ACK)
        reg.record("slow", "p-0", [1, 3], Outcome.ACK)
    return Built(root, metas)


def run(args: Sequence[str]) -> Result:
    """Invoke the CLI in-process (stdout and stderr kept apart)."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def run_json(args: Sequence[str], code: int = 0) -> dict[str, Any]:
    res = run([*args, "--json"])
    assert res.exit_code == code, res.output + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def kill_writer_after_append(root: Path, partition: str, rows: int) -> None:
    """A real writer process appends and flushes ``rows`` rows, heartbeats, then dies."""
    code = f"""
        import os, pyarrow as pa
        from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
        cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=600))
        s = QuiverStore.open({str(root)!r}, cfg, partition={partition!r}, background=False)
        s.append(pa.record_batch({{"id": pa.array(range({rows}), type=pa.int64()),
                                   "name": pa.array(["k"] * {rows})}}))
        s.flush()
        s.writer.write_heartbeat()   # what status reads (maintain() would also run retention)
        os._exit(0)    # killed: no close, no finalize; the rows live only in the WAL
        """
    run_python(code, timeout=60)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime, to prove nothing changed."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out
