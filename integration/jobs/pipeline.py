"""A pipeline through Quiver, submitted with ``spark-submit`` (one driver, several queries).

Queries, each with its own checkpoint under ``--ckpt``:

* ``producer``: the ``rate-micro-batch`` source (deterministic: batch ``i`` holds
  values ``[i*R, (i+1)*R)``, replayed identically after a restart) filtered to keys
  ``0 .. total-1``, written with ``format("quiver")``. Once a committed batch's end
  offset covers ``total`` the producer is stopped (and not restarted by a later
  attempt): the rows produced are exactly keys ``0 .. total-1``.
* one ``subscriber`` per ``--subscriber NAME:TRIGGER_SECONDS:MAX_SEGMENTS``: reads the
  store with that subscriber id and writes what it receives (with the
  ``_quiver_*`` metadata columns) to Parquet under ``--out/NAME``; the Parquet sink's
  own log makes that output exactly-once, so duplicates seen there are Quiver's.

The driver appends JSON lines to ``--events`` (start, where ``quiver_spark`` was
imported from on the driver and on the executors, producer done, failures, stop) and
runs until the file ``--stop-file`` appears, then stops every query and exits 0.
Any query failing makes it exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def emit(path: str, event: str, **fields: object) -> None:
    line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    print(f"[pipeline] {line}", flush=True)


def probe(_: object) -> tuple[str, int, str, str, str]:
    import pyspark_quiver
    import quiver_spark

    return (
        socket.gethostname(),
        os.getpid(),
        sys.executable,
        quiver_spark.__file__,
        pyspark_quiver.__file__,
    )


def producer_done(ckpt: Path, total: int) -> bool:
    """Whether the producer's last committed batch ended at or past ``total`` rows."""
    commits = ckpt / "commits"
    done = [int(p.name) for p in commits.glob("*") if p.name.isdigit()] if commits.is_dir() else []
    if not done:
        return False
    lines = (ckpt / "offsets" / str(max(done))).read_text().splitlines()
    return int(json.loads(lines[-1])["offset"]) >= total


def kv(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, _, v = p.partition("=")
        out[k] = v
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--rows-per-batch", type=int, default=200)
    ap.add_argument("--producer-trigger", type=float, default=1.0)
    ap.add_argument("--producer-partitions", type=int, default=4)
    ap.add_argument("--subscriber", action="append", default=[])
    ap.add_argument("--sink-option", action="append", default=[])
    ap.add_argument("--source-option", action="append", default=[])
    ap.add_argument("--max-runtime", type=float, default=1800.0)
    a = ap.parse_args()

    import pyspark_quiver
    import quiver_spark

    emit(
        a.events,
        "start",
        python=sys.executable,
        quiver_spark=quiver_spark.__file__,
        pyspark_quiver=pyspark_quiver.__file__,
        sys_path=sys.path,
    )
    spark = SparkSession.builder.appName("quiver-integration-pipeline").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    parallelism = max(2, spark.sparkContext.defaultParallelism * 2)
    seen = spark.sparkContext.parallelize(range(parallelism), parallelism).map(probe).collect()
    emit(a.events, "probe", executors=sorted({tuple(x) for x in seen}))

    ckpt = Path(a.ckpt)
    queries = {}
    if producer_done(ckpt / "producer", a.total):
        emit(a.events, "producer_done", already=True)
    else:
        rows = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", a.rows_per_batch)
            .option("numPartitions", a.producer_partitions)
            .option("startTimestamp", 0)
            .option("advanceMillisPerBatch", 1000)
            .load()
            .where(F.col("value") < a.total)
            .select(
                F.col("value").alias("key"),
                F.concat(F.lit("payload-"), F.col("value").cast("string")).alias("payload"),
                F.col("timestamp").alias("event_time"),
            )
        )
        writer = (
            rows.writeStream.format("quiver")
            .queryName("producer")
            .option("checkpointLocation", str(ckpt / "producer"))
        )
        for k, v in kv(a.sink_option).items():
            writer = writer.option(k, v)
        queries["producer"] = writer.trigger(processingTime=f"{a.producer_trigger} seconds").start(
            a.store
        )

    for spec in a.subscriber:
        name, trigger_s, max_segments = spec.split(":")
        reader = (
            spark.readStream.format("quiver")
            .option("subscriber", name)
            .option("includeMetadata", "true")
            .option("maxSegmentsPerTrigger", max_segments)
        )
        for k, v in kv(a.source_option).items():
            reader = reader.option(k, v)
        queries[name] = (
            reader.load(a.store)
            .writeStream.format("parquet")
            .queryName(name)
            .option("checkpointLocation", str(ckpt / name))
            .option("path", str(Path(a.out) / name))
            .trigger(processingTime=f"{trigger_s} seconds")
            .start()
        )
    emit(a.events, "running", queries=sorted(queries))

    deadline = time.monotonic() + a.max_runtime
    status = 0
    while time.monotonic() < deadline and not os.path.exists(a.stop_file):
        time.sleep(0.5)
        failed = {
            n: str(q.exception())
            for n, q in queries.items()
            if not q.isActive and q.exception() is not None
        }
        if failed:
            emit(a.events, "query_failed", failed=failed)
            status = 1
            break
        producer = queries.get("producer")
        if producer is not None and producer_done(ckpt / "producer", a.total):
            producer.stop()
            del queries["producer"]
            emit(a.events, "producer_done", already=False)
    else:
        if not os.path.exists(a.stop_file):
            emit(a.events, "timeout", seconds=a.max_runtime)
            status = 1
    for q in queries.values():
        q.stop()
    emit(a.events, "stopped", status=status)
    spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
