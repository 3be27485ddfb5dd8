"""Sink benchmarks P1, P2, P8, P9 (PERFORMANCE.md), side by side in one Spark session.

Run: ``.venv/bin/python bench/bench_sink.py [--rows 2000000] [--reps 7] [--small-batches 200]``

- P1: the same file stream into the quiver sink and into a Python no-op
  ``DataSourceStreamArrowWriter`` that discards (Arrow transfer floor), interleaved,
  median of ``--reps``. Goal: quiver <= 1.05x the no-op's time.
- P2: the same stream into Spark's Parquet file sink. Goal: quiver >= 1.0x its rows/s.
- P8: peak RSS (VmHWM) of the Python workers holding quiver slots, per
  ``segment.target_size``. Goal: <= 2x target + 200 MB.
- P9: the same rows as 100-row micro-batches vs fewer larger ones into quiver:
  throughput and per-batch latency (median / p95 trigger execution).

Writes bench/results/sink.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
SCHEMA = "id long, ts timestamp, s string, x double"


def make_input(directory: str, rows: int, files: int) -> None:
    os.makedirs(directory, exist_ok=True)
    per = rows // files
    for i in range(files):
        ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "ts": pa.array(
                    [1_700_000_000_000_000 + k for k in range(i * per, (i + 1) * per)],
                    pa.timestamp("us", "UTC"),
                ),
                "s": pa.array(
                    [
                        f"event-{k:012d}-payload-abcdefghijklmnopqrstuv"
                        for k in range(i * per, (i + 1) * per)
                    ]
                ),
                "x": pa.array([k * 0.5 for k in range(i * per, (i + 1) * per)], pa.float64()),
            }
        )
        pq.write_table(table, os.path.join(directory, f"part-{i:05d}.parquet"))


def noop_source_class() -> type:
    from dataclasses import dataclass as dc

    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    @dc
    class Done(WriterCommitMessage):
        rows: int

    class NoopWriter(DataSourceStreamArrowWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            n = 0
            for b in iterator:
                n += b.num_rows
            return Done(n)

        def commit(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

        def abort(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

    class NoopSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pynoop"

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return NoopWriter()

    return NoopSink


@dataclass
class Run:
    seconds: float
    batches: int
    trigger_ms: list[float]


def run_stream(
    spark: Any, src: str, sink: str, work: str, files_per_trigger: int, **opts: str
) -> Run:
    out = tempfile.mkdtemp(dir=work, prefix=f"{sink}-")
    df = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger).parquet(src)
    )
    w = df.writeStream.format(sink).option("checkpointLocation", os.path.join(out, "ckpt"))
    for k, v in opts.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    q = w.trigger(availableNow=True).start(os.path.join(out, "data"))
    q.awaitTermination()
    dt = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    trig = [
        p["durationMs"].get("triggerExecution", 0.0) for p in q.recentProgress if p["numInputRows"]
    ]
    return Run(dt, len(trig), trig)


def slot_worker_peaks() -> dict[int, int]:
    """VmHWM (bytes) of every process holding a quiver partition LOCK open."""
    peaks: dict[int, int] = {}
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            fds = [os.readlink(f) for f in glob.glob(f"{proc}/fd/*")]
        except OSError:
            continue
        if not any(f.endswith("/LOCK") and "/partitions/" in f for f in fds):
            continue
        try:
            for line in open(f"{proc}/status"):
                if line.startswith("VmHWM:"):
                    peaks[int(proc.split("/")[-1])] = int(line.split()[1]) * 1024
        except OSError:
            continue
    return peaks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument(
        "--small-batches", type=int, default=200, help="P9: 100-row batches (1000 = full)"
    )
    ap.add_argument("--out", default=str(HERE / "results" / "sink.json"))
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    work = tempfile.mkdtemp(prefix="quiver-bench-sink-")
    os.environ["TMPDIR"] = work
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", work)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(noop_source_class())
    results: dict[str, Any] = {"rows": args.rows, "reps": args.reps, "cores": os.cpu_count()}
    try:
        src = os.path.join(work, "in")
        make_input(src, args.rows, args.files)
        quiver_opts = {"segment.max_open_duration": "1s"}
        # warm-up: worker start and JIT for every sink
        for sink, opts in (("quiver", quiver_opts), ("pynoop", {}), ("parquet", {})):
            run_stream(spark, src, sink, work, args.files, **opts)
        times: dict[str, list[float]] = {"quiver": [], "pynoop": [], "parquet": []}
        for _ in range(args.reps):  # interleaved: A B C A B C ...
            for sink in times:
                opts = quiver_opts if sink == "quiver" else {}
                times[sink].append(run_stream(spark, src, sink, work, args.files, **opts).seconds)
        med = {k: statistics.median(v) for k, v in times.items()}
        results["P1"] = {
            "quiver_s": times["quiver"], "noop_python_s": times["pynoop"],
            "ratio_time_quiver_over_noop": med["quiver"] / med["pynoop"], "goal": "<= 1.05",
        }  # fmt: skip
        results["P2"] = {
            "quiver_s": times["quiver"], "parquet_s": times["parquet"],
            "quiver_rows_per_s": args.rows / med["quiver"],
            "parquet_rows_per_s": args.rows / med["parquet"],
            "ratio_rows_per_s_quiver_over_parquet": med["parquet"] / med["quiver"], "goal": ">= 1.0",
        }  # fmt: skip

        # P8: peak RSS of the slot-holding workers for growing target sizes
        p8 = []
        for target in ("8MB", "64MB"):
            run_stream(
                spark, src, "quiver", work, 1, **{**quiver_opts, "segment.target_size": target}
            )
            peaks = slot_worker_peaks()
            tbytes = int(target[:-2]) * 1024**2
            peak = max(peaks.values()) if peaks else 0
            p8.append({"target_size": target, "peak_rss_bytes": peak, "workers": len(peaks),
                       "bound_bytes": 2 * tbytes + 200 * 1024**2,
                       "within_goal": bool(peaks) and peak <= 2 * tbytes + 200 * 1024**2})  # fmt: skip
        results["P8"] = p8

        # P9: the same rows in 100-row micro-batches vs fewer larger ones
        total = args.small_batches * 100
        p9 = []
        for rows_per_batch in (100, 1000, total):
            d = os.path.join(work, f"p9-{rows_per_batch}")
            make_input(d, total, total // rows_per_batch)
            r = run_stream(spark, d, "quiver", work, 1, **quiver_opts)
            trig = sorted(r.trigger_ms) or [0.0]
            p9.append({
                "rows_per_batch": rows_per_batch, "batches": r.batches, "seconds": r.seconds,
                "rows_per_s": total / r.seconds, "batch_ms_median": statistics.median(trig),
                "batch_ms_p95": trig[min(len(trig) - 1, int(0.95 * len(trig)))],
            })  # fmt: skip
        results["P9"] = p9
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    p1, p2 = results["P1"], results["P2"]
    lines = [
        f"Sink benchmarks: {args.rows:,} rows, local[2], median of {args.reps} interleaved runs",
        "",
        "| # | measure | quiver | baseline | ratio | goal |",
        "|---|---|---|---|---|---|",
        f"| P1 | stream time vs Python no-op Arrow sink | {statistics.median(p1['quiver_s']):.2f} s "
        f"| {statistics.median(p1['noop_python_s']):.2f} s | {p1['ratio_time_quiver_over_noop']:.2f}x time | <= 1.05x |",
        f"| P2 | rows/s vs Spark Parquet sink | {p2['quiver_rows_per_s'] / 1e6:.2f} M/s "
        f"| {p2['parquet_rows_per_s'] / 1e6:.2f} M/s | {p2['ratio_rows_per_s_quiver_over_parquet']:.2f}x | >= 1.0x |",
    ]
    for m in results["P8"]:
        lines.append(
            f"| P8 | peak worker RSS, target_size {m['target_size']} | {m['peak_rss_bytes'] / 1024**2:.0f} MB "
            f"| bound {m['bound_bytes'] / 1024**2:.0f} MB | {'ok' if m['within_goal'] else 'over'} | <= 2x target + 200 MB |"
        )
    lines += ["", "P9 (quiver sink, same rows, availableNow):", "",
              "| rows/batch | batches | rows/s | batch ms median | batch ms p95 |",
              "|---|---|---|---|---|"]  # fmt: skip
    for m in results["P9"]:
        lines.append(
            f"| {m['rows_per_batch']} | {m['batches']} | {m['rows_per_s']:,.0f} "
            f"| {m['batch_ms_median']:.0f} | {m['batch_ms_p95']:.0f} |"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
