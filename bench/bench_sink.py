"""Sink benchmarks P1, P2, P8, P9 (README "Benchmarks"), side by side in one Spark session.

Run: ``.venv/bin/python bench/bench_sink.py [--rows 2000000] [--reps 7] [--only p9]``

- P1: the same file stream into the quiver sink and into a Python no-op
  ``DataSourceStreamArrowWriter`` that discards (Arrow transfer floor), interleaved,
  median of ``--reps``. Goal: quiver <= 1.05x the no-op's time.
- P2: the same stream into Spark's Parquet file sink. Goal: quiver >= 1.0x its rows/s.
- P8: peak RSS (VmHWM) of the Python workers holding quiver slots, per
  ``segment.target_size``. Goal: <= 2x target + 200 MB.
- P9: the fixed cost of one micro-batch: the same 100-row (and 1,000-row)
  micro-batches (``--p9-batches`` per run, one file each) into quiver, the no-op
  Python Arrow sink and Spark's Parquet sink, interleaved (A B C A B C ...,
  ``--p9-reps`` rounds). Per-batch time = Spark's ``triggerExecution`` of every
  batch but a run's first; the median per run, then the median of the runs.
  Goal: quiver <= 1.1x the no-op Python sink's per-batch time.

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
from benchdata import earlier_runs, run_ended, run_started

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
    ap.add_argument("--p9-batches", type=int, default=40, help="P9: micro-batches per run")
    ap.add_argument("--p9-reps", type=int, default=3, help="P9: interleaved rounds")
    ap.add_argument("--only", choices=["p9"], help="run P9 alone, keep P1/P2/P8 of --out")
    ap.add_argument("--out", default=str(HERE / "results" / "sink.json"))
    args = ap.parse_args()
    run = run_started()

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
    results: dict[str, Any] = {"rows": args.rows, "reps": args.reps, "cores": os.cpu_count(),
                               "load_avg_1m_start": os.getloadavg()[0]}  # fmt: skip
    if args.only:
        with open(args.out) as f:
            earlier = json.load(f)
        results.update({k: earlier[k] for k in ("rows", "reps", "P1", "P2", "P8")})
        results["earlier_runs"] = earlier_runs(earlier, ["P1", "P2", "P8"])
    quiver_opts = {"segment.max_open_duration": "1s"}
    try:
        if not args.only:
            p1_p2_p8(spark, args, work, results, quiver_opts)
        results["P9"] = p9(spark, args, work, quiver_opts)
        results["load_avg_1m_end"] = os.getloadavg()[0]
        results["run"] = run_ended(run)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    write_report(args, results)
    return 0


def p1_p2_p8(spark: Any, args: Any, work: str, results: dict[str, Any], quiver_opts: dict[str, str]) -> None:  # fmt: skip
    src = os.path.join(work, "in")
    make_input(src, args.rows, args.files)
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


def p9(spark: Any, args: Any, work: str, quiver_opts: dict[str, str]) -> list[dict[str, Any]]:
    """Per-batch time of tiny micro-batches, three sinks side by side."""
    out = []
    sinks = {"quiver": quiver_opts, "pynoop": {}, "parquet": {}}
    for rows_per_batch in (100, 1000):
        d = os.path.join(work, f"p9-{rows_per_batch}")
        make_input(d, rows_per_batch * args.p9_batches, args.p9_batches)
        per_run: dict[str, list[float]] = {k: [] for k in sinks}
        p95: dict[str, list[float]] = {k: [] for k in sinks}
        for k, opts in sinks.items():  # warm-up (one short run each)
            run_stream(spark, d, k, work, args.p9_batches, **opts)
        for _ in range(args.p9_reps):
            for k, opts in sinks.items():
                r = run_stream(spark, d, k, work, 1, **opts)
                trig = sorted(r.trigger_ms[1:]) or [0.0]
                per_run[k].append(statistics.median(trig))
                p95[k].append(trig[min(len(trig) - 1, int(0.95 * len(trig)))])
        med = {k: statistics.median(v) for k, v in per_run.items()}
        out.append({
            "rows_per_batch": rows_per_batch, "batches_per_run": args.p9_batches,
            "rounds": args.p9_reps,
            "batch_ms_per_run": per_run, "batch_ms_p95_per_run": p95,
            "batch_ms_median": med,
            "ratio_quiver_over_noop": med["quiver"] / med["pynoop"],
            "ratio_quiver_over_noop_per_round": [
                q / n for q, n in zip(per_run["quiver"], per_run["pynoop"], strict=True)
            ],
            "ratio_quiver_over_parquet": med["quiver"] / med["parquet"],
            "goal": "quiver <= 1.1x pynoop",
        })  # fmt: skip
    return out


def write_report(args: Any, results: dict[str, Any]) -> None:
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
    p9r = results["P9"]
    lines += ["", f"P9: per-micro-batch time (median triggerExecution of {p9r[0]['batches_per_run']} "
              f"one-file micro-batches per run, median of {p9r[0]['rounds']} interleaved rounds; "
              f"load avg {results.get('load_avg_1m_start', 0):.1f} -> "
              f"{results.get('load_avg_1m_end', 0):.1f}):", "",
              "| rows/batch | quiver | no-op Python Arrow sink | Spark Parquet sink "
              "| quiver / no-op (goal <= 1.1x) | per round | quiver / Parquet |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in p9r:
        b = m["batch_ms_median"]
        rounds = ", ".join(f"{r:.2f}" for r in m["ratio_quiver_over_noop_per_round"])
        lines.append(
            f"| {m['rows_per_batch']:,} | {b['quiver']:.0f} ms | {b['pynoop']:.0f} ms "
            f"| {b['parquet']:.0f} ms | {m['ratio_quiver_over_noop']:.2f}x | {rounds} "
            f"| {m['ratio_quiver_over_parquet']:.2f}x |"
        )
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
