"""P5: cold full scan of a finalized segment vs a raw sequential read of the same file.

Writes one ~256 MB segment (int64, float64, timestamp, ~50-byte string; 10k-row
batches) through ``SegmentLocation.write``, then alternates, cache dropped before
each run:

* A ``quiver scan``: ``SegmentLocation.open`` (memory map, size + CRC-32C of the whole
  file, footer) then every batch, touching every buffer (CRC-32C of each buffer, the
  cheapest way to read all bytes);
* B ``raw read``: ``readinto`` of the file in 8 MiB chunks into one reusable buffer.

A B A B ..., median of ``--rounds`` (>= 3). The page cache is dropped with
``echo 3 > /proc/sys/vm/drop_caches`` when permitted, else with
``posix_fadvise(DONTNEED)`` on the file (the method is printed). Also reports the
CRC-32C verify rate on cached data and the finalize (write) rate. Prints a markdown
table and writes ``bench/results/segment.json``. Goal: A >= 0.5x B and >= 1 GB/s.

    .venv/bin/python bench/bench_segment.py [--size-mb 256] [--rounds 7] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from benchdata import distinct_batches, run_ended, run_started
from crc32c import crc32c

from quiver_spark.segment import SegmentLocation, SegmentMeta

CHUNK = 8 * 1024 * 1024


def make_batches(target_bytes: int) -> list[pa.RecordBatch]:
    """Distinct 10k-row batches cycled until the data reaches ``target_bytes``."""
    distinct = distinct_batches()
    out, total = [], 0
    while total < target_bytes:
        b = distinct[len(out) % len(distinct)]
        out.append(b)
        total += b.nbytes
    return out


def drop_cache(path: str) -> str:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return "fadvise_dontneed"


def quiver_scan(loc: SegmentLocation, meta: SegmentMeta) -> int:
    touched = 0
    with loc.open(meta, verify=True) as reader:
        for batch in reader.batches():
            for column in batch.columns:
                for buf in column.buffers():
                    if buf is not None:
                        crc32c(memoryview(buf))
                        touched += buf.size
    return touched


def raw_read(path: str) -> int:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default=None, help="where to write the segment (a local disk)")
    args = ap.parse_args()
    run = run_started()
    rounds = max(3, args.rounds)

    work = tempfile.mkdtemp(prefix="quiver-bench-seg-", dir=args.dir)
    try:
        loc = SegmentLocation(work)
        batches = make_batches(args.size_mb * 1024 * 1024)
        t0 = time.perf_counter()
        meta = loc.write(
            "p0", 1, batches, min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[(1, len(batches))]
        )
        write_s = time.perf_counter() - t0
        del batches
        path = os.path.join(work, "p0", "00000000000000000001.arrow")
        size = meta.size_bytes

        runs: dict[str, list[float]] = {"scan": [], "raw": []}
        steps = {
            "scan": lambda: quiver_scan(loc, meta),
            "raw": lambda: raw_read(path),
        }
        method = ""
        for _ in range(rounds):
            for name, step in steps.items():
                method = drop_cache(path)
                t0 = time.perf_counter()
                step()
                runs[name].append(time.perf_counter() - t0)
        touched = quiver_scan(loc, meta)

        mm = pa.memory_map(path).read_buffer()  # warm now: pure CRC rate
        crc_s = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            crc32c(memoryview(mm))
            crc_s.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    gb = size / 1e9
    med = {k: statistics.median(v) for k, v in runs.items()}
    crc = statistics.median(crc_s)
    result = {
        "bench": "P5 segment cold scan",
        "run": run_ended(run),
        "size_bytes": size,
        "batches": meta.batches,
        "rows": meta.rows,
        "touched_bytes": touched,
        "rounds": rounds,
        "cache_drop": method,
        "runs_s": runs,
        "gbps": {k: gb / v for k, v in med.items()},
        "ratio_scan_vs_raw": med["raw"] / med["scan"],
        "crc_verify_gbps": gb / crc,
        "write_gbps": gb / write_s,
        "goal": "scan >= 0.5x raw read and >= 1 GB/s",
    }
    out = Path(__file__).resolve().parent / "results" / "segment.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"segment {size / 2**20:.0f} MiB, {meta.batches} batches, {meta.rows:,} rows; cache "
        f"dropped with {method} before every run; median of {rounds}, interleaved\n"
    )
    print(
        "| # | quiver | baseline | ratio | quiver GB/s | baseline GB/s | crc verify GB/s | goal |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, label in (("scan", "cold scan: open + crc verify + touch every batch (mmap)"),):
        ratio, rate = med["raw"] / med[name], gb / med[name]
        met = "met" if ratio >= 0.5 and rate >= 1.0 else "NOT met"
        print(
            f"| P5 | {label} | raw sequential read | {ratio:.2f}x | {rate:.2f} | "
            f"{gb / med['raw']:.2f} | {gb / crc:.1f} | {met} (>= 0.5x, >= 1 GB/s) |"
        )
    print(f"\nfinalize (write + fsync + publish) {gb / write_s:.2f} GB/s, single run")


if __name__ == "__main__":
    main()
