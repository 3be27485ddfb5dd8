"""P4: WAL append of 10k-row Arrow batches vs a raw sequential write of the same bytes.

Builds 10k-row batches (int64, float64, timestamp, ~50-byte string; ~780 KB each)
and alternates, in fresh directories:

* A ``quiver wal``: ``WalWriter.append_batch`` of every batch with the default 25 ms
  background group fsync, then ``flush()`` (everything durable; files rotate at the
  default 64 MB, each new file's header and directory are fsynced);
* B ``raw``: ``os.write`` of the same serialized batch bytes to one file, then one
  ``fdatasync`` (the ideal: no framing, no checksum, one sync);
* C ``quiver wal, fsync per append`` (``flush_interval_s = 0``), context only.

A B C A B C ..., median of ``--rounds`` (>= 3). Prints a markdown table and writes
``bench/results/wal.json``. Goal: A >= 0.75x B.

    .venv/bin/python bench/bench_wal.py [--batches 240] [--rounds 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from benchdata import ROWS, distinct_batches, run_ended, run_started

from quiver_spark.config import WalConfig
from quiver_spark.wal import WalWriter

RESULTS = Path(__file__).resolve().parent / "results"


def make_batches(n: int) -> list[pa.RecordBatch]:
    """``n`` 10k-row batches cycling over 8 distinct ones."""
    distinct = distinct_batches()
    return [distinct[i % 8] for i in range(n)]


def run_wal(d: str, batches: list[pa.RecordBatch], interval: float) -> float:
    w = WalWriter(d, WalConfig(flush_interval_s=interval), next_record_seq=1)
    t0 = time.perf_counter()
    for i, b in enumerate(batches):
        w.append_batch(b, ingestion_ns=i)
    w.flush()
    took = time.perf_counter() - t0
    w.close()
    return took


def run_raw(d: str, payloads: list[pa.Buffer]) -> float:
    t0 = time.perf_counter()
    fd = os.open(os.path.join(d, "raw.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for p in payloads:
            view = memoryview(p)
            while view:
                view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="parent of the scratch directories")
    args = ap.parse_args()
    run = run_started()
    if args.rounds < 3:
        ap.error("--rounds must be >= 3")
    batches = make_batches(args.batches)
    payloads = [b.serialize() for b in batches]
    nbytes = sum(p.size for p in payloads)
    runs: dict[str, Callable[[str], float]] = {
        "wal_group_fsync": lambda d: run_wal(d, batches, 0.025),
        "raw": lambda d: run_raw(d, payloads),
        "wal_fsync_per_append": lambda d: run_wal(d, batches, 0.0),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    scratch = tempfile.mkdtemp(prefix="bench-wal-", dir=args.dir)
    try:
        for fn in runs.values():  # warm-up: page cache, allocator, imports
            d = tempfile.mkdtemp(dir=scratch)
            fn(d)
            shutil.rmtree(d)
        for _ in range(args.rounds):
            for name, fn in runs.items():
                d = tempfile.mkdtemp(dir=scratch)
                times[name].append(fn(d))
                shutil.rmtree(d)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    gbps = {k: nbytes / v / 1e9 for k, v in med.items()}
    ratio = med["raw"] / med["wal_group_fsync"]
    ratio_inline = med["raw"] / med["wal_fsync_per_append"]
    batch_kb = nbytes / len(payloads) / 1024
    print("| # | what | quiver | raw write + fdatasync | ratio | goal |")
    print("|---|---|---|---|---|---|")
    print(
        f"| P4 | WAL append, 25 ms group fsync, {args.batches} x 10k-row batches "
        f"({batch_kb:.0f} KB) | {gbps['wal_group_fsync']:.2f} GB/s | {gbps['raw']:.2f} GB/s "
        f"| {ratio:.2f}x | >= 0.75x |"
    )
    print(
        f"| P4' | WAL append, fsync per append (context) | {gbps['wal_fsync_per_append']:.2f}"
        f" GB/s | {gbps['raw']:.2f} GB/s | {ratio_inline:.2f}x | - |"
    )
    RESULTS.mkdir(exist_ok=True)
    out = {
        "bench": "P4 wal append",
        "run": run_ended(run),
        "batches": args.batches,
        "rows_per_batch": ROWS,
        "bytes": nbytes,
        "rounds": args.rounds,
        "runs_s": times,
        "median_s": med,
        "gb_per_s": gbps,
        "ratio_group_fsync_vs_raw": ratio,
        "ratio_fsync_per_append_vs_raw": ratio_inline,
        "goal": 0.75,
        "pass": ratio >= 0.75,
    }
    (RESULTS / "wal.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
