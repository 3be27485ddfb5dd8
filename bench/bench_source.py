"""Source benchmarks: P3 (throughput vs the Python floor and Parquet) and P7 (commit -> visible).

P3: the same rows (int64, timestamp, ~50-byte string, double) stored once as Quiver
segments and once as Parquet files; a streaming query drains each into Spark's noop
sink with Trigger.AvailableNow. Beside them the floor of PySpark's Python Data Source
API: a minimal ``DataSourceStreamReader`` reading the very same segment ``.arrow``
files (one input partition per file, memory-mapped, record batches yielded as they
are; no checksum, no metadata, no acks). Runs alternate (quiver, floor, parquet,
floor_packed, quiver, ...) after one warm-up of each; medians of ``--reps``.
``floor_packed`` (context) is the floor reading the same files in as many input
partitions as Quiver plans for them (Quiver packs small segments into one task). The goal is quiver >=
0.95x the floor's rows/s at a volume where PySpark's fixed start of a Python stream
source is amortised (>= 20M rows, the default; ``--rows 2000000`` for a quick run).
Batch reads (``spark.read`` -> noop) are measured quiver vs parquet for context.

P7: a foreground loop appends small DataFrames through the quiver sink
(``df.write.format("quiver")``); a source stream with a 100 ms processing-time
trigger records when each write's rows arrive in ``foreachBatch``. Latency = arrival
time - time the sink's ``save()`` returned (its driver commit), same process clock.

Run: ``.venv/bin/python bench/bench_source.py`` (writes bench/results/source.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from benchdata import earlier_runs, run_ended, run_started

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from quiver_spark import QuiverStore, StoreConfig  # noqa: E402
from quiver_spark.config import SegmentConfig  # noqa: E402
from quiver_spark.subscribers import StartPosition, SubscriberRegistry  # noqa: E402

SCHEMA = "id long, ts timestamp, s string, x double"


def make_batch(start: int, n: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "ts": pa.array([1_700_000_000_000_000 + i for i in range(start, start + n)],
                           pa.timestamp("us", "UTC")),
            "s": pa.array([f"event-{i:012d}-payload-abcdefghijklmnopqrstuvwxyz"
                           for i in range(start, start + n)]),
            "x": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def prepare_data(work: Path, rows: int, batch_rows: int = 10_000) -> tuple[str, str, int]:
    """Write the same rows as a Quiver store (2 partitions) and as Parquet files."""
    root, pq_dir = work / "store", work / "parquet"
    pq_dir.mkdir(parents=True)
    config = StoreConfig(segment=SegmentConfig(target_size_bytes=32 * 1024 * 1024))
    per_part = rows // 2
    nbytes = 0
    for p in range(2):
        with QuiverStore.open(str(root), config, partition=f"p-{p}", background=False) as store:
            writer = None
            writer_rows = 0
            for i in range(p * per_part, (p + 1) * per_part, batch_rows):
                b = make_batch(i, min(batch_rows, (p + 1) * per_part - i))
                nbytes += b.nbytes
                store.append(b)
                if writer is None or writer_rows >= 1_000_000:
                    if writer is not None:
                        writer.close()
                    writer = pq.ParquetWriter(str(pq_dir / f"part-{p}-{i:012d}.parquet"),
                                              b.schema, compression="snappy")
                    writer_rows = 0
                writer.write_batch(b)
                writer_rows += b.num_rows
            writer.close()
            store.flush()
    with SubscriberRegistry.open(str(root)) as reg:  # pins every segment for the bench
        reg.register("pin", start=StartPosition.EARLIEST)
    return str(root), str(pq_dir), nbytes


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _empty_python_source():
    """A Python stream source with one empty batch: PySpark's fixed per-query cost.

    Every Python streaming source pays it before its first offset call (PySpark starts
    a planner process for the query); measured here so the report can show how much
    of Quiver's streaming time is that constant rather than reading.
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class EmptyReader(DataSourceStreamReader):
        def initialOffset(self):
            return {"o": 0}

        def latestOffset(self):
            return {"o": 1}

        def partitions(self, start, end):
            return [InputPartition(0)]

        def read(self, partition):
            return iter(())

    class EmptySource(DataSource):
        @classmethod
        def name(cls):
            return "bench_empty_python_source"

        def schema(self):
            return "x bigint"

        def streamReader(self, schema):
            return EmptyReader()

    return EmptySource


def _floor_python_source():
    """The floor of the Python Data Source API for reading Arrow IPC segment files.

    Option ``path``: a directory of ``<partition>/<seq>.arrow`` files (a Quiver store's
    ``segments/``); every ``.arrow`` with its ``.meta`` beside it is one input
    partition, memory-mapped and yielded batch by batch. Offsets count files.
    Option ``tasks`` (context only, not the floor): read the same files in that many
    input partitions of consecutive files instead, as Quiver packs small segments.
    """
    import glob as _glob

    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class FileSplit(InputPartition):
        def __init__(self, path: str) -> None:
            self.path = path

    class FilesSplit(InputPartition):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

    class FloorReader(DataSourceStreamReader):
        def __init__(self, path: str, tasks: int | None) -> None:
            self.path = path
            self.tasks = tasks

        def _files(self) -> list[str]:
            return sorted(f for f in _glob.glob(os.path.join(self.path, "*", "*.arrow"))
                          if os.path.exists(f[: -len(".arrow")] + ".meta"))

        def initialOffset(self):
            return {"files": 0}

        def latestOffset(self):
            return {"files": len(self._files())}

        def partitions(self, start, end):
            files = self._files()[start["files"]:end["files"]]
            if self.tasks is None:
                return [FileSplit(f) for f in files]
            k = min(self.tasks, len(files))
            return [FilesSplit(files[i * len(files) // k:(i + 1) * len(files) // k])
                    for i in range(k)]

        def read(self, partition):
            if isinstance(partition, FilesSplit):
                for path in partition.paths:
                    reader = pa.ipc.open_file(pa.memory_map(path))
                    for i in range(reader.num_record_batches):
                        yield reader.get_batch(i)
                return
            reader = pa.ipc.open_file(pa.memory_map(partition.path))
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "bench_floor_arrow_source"

        def schema(self):
            return SCHEMA

        def streamReader(self, schema):
            tasks = self.options.get("tasks")
            return FloorReader(self.options["path"], int(tasks) if tasks else None)

    return FloorSource


def quiver_read_tasks(root: str) -> tuple[int, int]:
    """(segments, read tasks) of one Quiver micro-batch over every segment of ``root``
    with the default splitSize, as planned on this machine."""
    from quiver_spark.segment import SegmentLocation
    from quiver_spark.spark.source_options import parse_source_options
    from quiver_spark.subscription.read_tasks import pack_read_tasks

    loc = SegmentLocation(os.path.join(root, "segments"))
    metas = [loc.read_meta(p, seq) for p in sorted(os.listdir(os.path.join(root, "segments")))
             for seq in sorted(int(n.split(".")[0]) for n in
                               os.listdir(os.path.join(root, "segments", p)) if n.endswith(".meta"))]
    split = parse_source_options({"path": root}, streaming=False).split_size_bytes
    return len(metas), len(pack_read_tasks(metas, split, min_tasks=os.cpu_count() or 1))


def p3(spark, root: str, pq_dir: str, rows: int, reps: int, work: Path) -> dict:
    counter = iter(range(10_000))
    spark.dataSource.register(_empty_python_source())
    spark.dataSource.register(_floor_python_source())

    def empty_python_stream() -> None:
        i = next(counter)
        q = (spark.readStream.format("bench_empty_python_source").load()
             .writeStream.format("noop").option("checkpointLocation", str(work / f"ce{i}"))
             .trigger(availableNow=True).start())
        q.awaitTermination()

    def quiver_stream() -> None:
        i = next(counter)
        q = (spark.readStream.format("quiver").option("subscriber", f"bench{i}").load(root)
             .writeStream.format("noop").option("checkpointLocation", str(work / f"cq{i}"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert sum(p["numInputRows"] for p in q.recentProgress) == rows

    def floor_stream(tasks: int | None = None) -> None:
        i = next(counter)
        r = spark.readStream.format("bench_floor_arrow_source")
        if tasks is not None:
            r = r.option("tasks", str(tasks))
        q = (r.load(os.path.join(root, "segments"))
             .writeStream.format("noop").option("checkpointLocation", str(work / f"cf{i}"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert sum(p["numInputRows"] for p in q.recentProgress) == rows

    def parquet_stream() -> None:
        i = next(counter)
        q = (spark.readStream.schema(SCHEMA).parquet(pq_dir)
             .writeStream.format("noop").option("checkpointLocation", str(work / f"cp{i}"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert sum(p["numInputRows"] for p in q.recentProgress) == rows

    def quiver_batch() -> None:
        spark.read.format("quiver").load(root).write.format("noop").mode("overwrite").save()

    def parquet_batch() -> None:
        spark.read.parquet(pq_dir).write.format("noop").mode("overwrite").save()

    out = {}
    segments, tasks = quiver_read_tasks(root)
    # streaming: quiver, the Python floor and parquet, interleaved; beside them (context)
    # the floor reading the same files in as many tasks as Quiver plans (it packs small
    # segments): what is left of Quiver's own cost once task counts are equal
    runs = {"quiver": quiver_stream, "floor": floor_stream, "parquet": parquet_stream,
            "floor_packed": lambda: floor_stream(tasks)}
    for fn in runs.values():  # warm-up
        fn()
    t: dict[str, list[float]] = {k: [] for k in runs}
    load: list[float] = []
    for _ in range(reps):
        load.append(os.getloadavg()[0])
        for k, fn in runs.items():
            t[k].append(timed(fn))
    m = {k: statistics.median(v) for k, v in t.items()}
    out["stream"] = {
        "quiver_s": t["quiver"], "floor_s": t["floor"], "parquet_s": t["parquet"],
        "quiver_median_s": m["quiver"], "floor_median_s": m["floor"],
        "parquet_median_s": m["parquet"],
        "quiver_rows_per_s": rows / m["quiver"], "floor_rows_per_s": rows / m["floor"],
        "parquet_rows_per_s": rows / m["parquet"],
        "ratio_quiver_vs_floor": m["floor"] / m["quiver"],
        "ratio_quiver_vs_parquet": m["parquet"] / m["quiver"],
        # pairwise ratios of each repetition (same round): how noisy the ratio was
        "ratio_quiver_vs_floor_per_rep": [f / q for q, f in zip(t["quiver"], t["floor"], strict=True)],
        "goal_vs_floor": ">= 0.95",
        "load_avg_1m_per_rep": load,
        "segments": segments, "quiver_tasks": tasks,
        "floor_packed_s": t["floor_packed"], "floor_packed_median_s": m["floor_packed"],
        "floor_packed_rows_per_s": rows / m["floor_packed"],
        "ratio_quiver_vs_floor_packed": m["floor_packed"] / m["quiver"],
        "ratio_quiver_vs_floor_packed_per_rep": [
            f / q for q, f in zip(t["quiver"], t["floor_packed"], strict=True)],
    }
    for name, a, b in (("batch", quiver_batch, parquet_batch),):
        a(), b()  # warm-up
        qa, pb = [], []
        for _ in range(reps):
            qa.append(timed(a))
            pb.append(timed(b))
        mq, mp = statistics.median(qa), statistics.median(pb)
        out[name] = {
            "quiver_s": qa, "parquet_s": pb, "quiver_median_s": mq, "parquet_median_s": mp,
            "quiver_rows_per_s": rows / mq, "parquet_rows_per_s": rows / mp,
            "ratio_quiver_vs_parquet": mp / mq,
        }
    # PySpark's fixed cost of starting any Python stream source, same run
    empty_python_stream()  # warm-up
    fixed = statistics.median(timed(empty_python_stream) for _ in range(reps))
    s = out["stream"]
    s["empty_python_source_median_s"] = fixed
    s["ratio_excluding_python_source_startup"] = s["parquet_median_s"] / max(
        s["quiver_median_s"] - fixed, 1e-9
    )
    return out


def p7(spark, work: Path, samples: int, trigger_ms: int, max_open: str) -> dict:
    root = str(work / "p7store")
    opts = {"segment.max_open_duration": max_open, "wal.flush_interval": "10ms"}

    def write(marker: int) -> float:
        df = spark.range(1000).selectExpr(f"{marker} AS marker", "id")
        w = df.coalesce(1).write.format("quiver").mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        w.save(root)
        return time.time()

    write(-1)  # creates the store and its schema
    seen: dict[int, float] = {}
    lock = threading.Lock()

    def on_batch(df, _batch_id):
        now = time.time()
        markers = {r.marker for r in df.select("marker").collect()}  # one stage, no shuffle
        with lock:
            for m in markers:
                seen.setdefault(m, now)

    q = (spark.readStream.format("quiver").option("subscriber", "p7").load(root)
         .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(work / "ckpt-p7"))
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    deadline = time.time() + 120
    while -1 not in seen and time.time() < deadline:
        time.sleep(0.05)
    committed: dict[int, float] = {}
    for m in range(samples):
        committed[m] = write(m)
        time.sleep(0.3 + (m % 5) * 0.07)  # spread commits across trigger phases
    deadline = time.time() + 60
    while len([m for m in committed if m in seen]) < samples and time.time() < deadline:
        time.sleep(0.05)
    error = q.exception()
    progress = [p["durationMs"] for p in q.recentProgress if p["numInputRows"] > 0]
    q.stop()
    lat = sorted((seen[m] - committed[m]) * 1000 for m in committed if m in seen)
    missing = samples - len(lat)
    if not lat:
        raise RuntimeError(f"P7: no written marker became visible (query error: {error})")

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, round(p / 100 * (len(lat) - 1)))]

    return {
        "trigger_ms": trigger_ms, "segment.max_open_duration": max_open, "samples": len(lat),
        "missing": missing, "p50_ms": pct(50), "p99_ms": pct(99), "max_ms": lat[-1],
        "goal_p50_ms": trigger_ms + 100,
        # Spark's own share of each batch with rows (its checkpoint writes and planning)
        "spark_p50_ms": {
            k: statistics.median(d.get(k, 0) for d in progress)
            for k in ("latestOffset", "walCommit", "queryPlanning", "commitOffsets")
        } if progress else {},
    }


def _save(path: str, result: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000,
                    help="P3 volume (>= 20M for the reported figure)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--only", choices=["p3", "p7"], help="run one benchmark, keep the other's")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "source.json"))
    args = ap.parse_args()
    run = run_started()
    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="quiver-bench-source-"))
    try:
        spark = (SparkSession.builder.master("local[2]").appName("bench-source")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.local.dir", str(work / "spark"))
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.sql.python.filterPushdown.enabled", "true")
                 .config("spark.driver.memory", "2g")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        earlier = {}
        if args.only and os.path.exists(args.out):  # the other benchmark's figures are kept
            with open(args.out) as f:
                earlier = json.load(f)
        t0 = time.perf_counter()
        root, pq_dir, nbytes = prepare_data(work, args.rows if args.only != "p7" else 20_000)
        prep_s = time.perf_counter() - t0
        result = {
            "machine": {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
            "rows": args.rows, "arrow_bytes": nbytes, "prepare_s": prep_s,
            "command": ".venv/bin/python bench/bench_source.py " + " ".join(sys.argv[1:]),
        }
        if args.only in (None, "p3"):
            result["P3"] = p3(spark, root, pq_dir, args.rows, args.reps, work)
            _save(args.out, result)
        else:  # keep the P3 figures (and their data size) of an earlier run
            for key in ("P3", "rows", "arrow_bytes", "prepare_s"):
                result[key] = earlier[key]
            result["machine"]["load_avg_1m_p3"] = earlier["machine"]["load_avg_1m"]
            result["earlier_runs"] = earlier_runs(earlier, ["P3"])
        if args.only in (None, "p7"):
            result["P7"] = p7(spark, work, args.samples, 100, "100ms")
        else:
            result["P7"] = earlier["P7"]
            result["earlier_runs"] = earlier_runs(earlier, ["P7"])
        result["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
        result["run"] = run_ended(run)
        _save(args.out, result)
        spark.stop()
    finally:
        time.sleep(2)  # let executor-side sink workers notice the session is gone
        shutil.rmtree(work, ignore_errors=True)
    res_p3, res_p7 = result["P3"], result["P7"]
    s, b = res_p3["stream"], res_p3["batch"]
    print(f"Source benchmarks, {result['rows']:,} rows "
          f"({result['arrow_bytes'] / 2**20:.0f} MB Arrow), local[2], "
          f"medians of {args.reps} (load avg {result['machine']['load_avg_1m']:.1f})\n")
    print("| # | what | quiver | baseline | ratio (goal) |")
    print("|---|---|---|---|---|")
    per_rep = ", ".join(f"{r:.2f}" for r in s["ratio_quiver_vs_floor_per_rep"])
    print(f"| P3 | stream -> noop, rows/s | {s['quiver_rows_per_s'] / 1e6:.2f} M/s | "
          f"Python floor (minimal stream reader, same .arrow files) "
          f"{s['floor_rows_per_s'] / 1e6:.2f} M/s | "
          f"{s['ratio_quiver_vs_floor']:.2f}x (>= 0.95x); per round {per_rep} |")
    per_rep_packed = ", ".join(f"{r:.2f}" for r in s["ratio_quiver_vs_floor_packed_per_rep"])
    print(f"| P3 | stream -> noop, rows/s | {s['quiver_rows_per_s'] / 1e6:.2f} M/s | "
          f"the floor reading the same files in Quiver's {s['quiver_tasks']} tasks "
          f"(one per file: {s['segments']}) {s['floor_packed_rows_per_s'] / 1e6:.2f} M/s | "
          f"{s['ratio_quiver_vs_floor_packed']:.2f}x (context); per round {per_rep_packed} |")
    print(f"| P3 | stream -> noop, rows/s | {s['quiver_rows_per_s'] / 1e6:.2f} M/s | "
          f"Parquet source {s['parquet_rows_per_s'] / 1e6:.2f} M/s | "
          f"{s['ratio_quiver_vs_parquet']:.2f}x (context) |")
    print(f"| P3 | same, less PySpark's fixed start of a Python stream source "
          f"({s['empty_python_source_median_s']:.1f} s per query, empty source, same run) | "
          f"{s['quiver_median_s'] - s['empty_python_source_median_s']:.2f} s | "
          f"Parquet {s['parquet_median_s']:.2f} s | "
          f"{s['ratio_excluding_python_source_startup']:.2f}x (context) |")
    print(f"| P3b | batch read -> noop, rows/s | {b['quiver_rows_per_s'] / 1e6:.2f} M/s | "
          f"Parquet {b['parquet_rows_per_s'] / 1e6:.2f} M/s | "
          f"{b['ratio_quiver_vs_parquet']:.2f}x (context) |")
    p7_note = " (an earlier run: --only p3)" if args.only == "p3" else ""
    print(f"| P7 | sink commit -> source batch, 100 ms trigger, max_open_duration 100ms{p7_note} | "
          f"p50 {res_p7['p50_ms']:.0f} ms, p99 {res_p7['p99_ms']:.0f} ms | "
          f"trigger 100 ms | p50 goal <= {res_p7['goal_p50_ms']} ms |")


if __name__ == "__main__":
    main()
