"""A pipeline through Quiver, submitted with ``spark-submit`` (one driver, several queries).

Queries, each with its own checkpoint under ``--ckpt``:

* ``producer``: the ``rate-micro-batch`` source (deterministic: batch ``i`` holds
  values ``[i*R, (i+1)*R)``, replayed identically after a restart) filtered to keys
  ``0 .. total-1``, written with ``format("quiver")``. Once a committed batch's end
  offset covers ``total`` the producer is stopped (and not restarted by a later
  attempt): the rows produced are exactly keys ``0 .. total-1``.
* once the store has a schema, one ``subscriber`` per ``--subscriber NAME:TRIGGER_SECONDS:MAX_SEGMENTS``: reads the
  store with that subscriber id and writes what it receives (with the
  ``_quiver_*`` metadata columns) to Parquet under ``--out/NAME``; the Parquet sink's
  own log makes that output exactly-once, so duplicates seen there are Quiver's.

The driver appends JSON lines to ``--events`` (start, where ``quiver_spark`` was
imported from on the driver and on the executors, producer done, failures, stop) and
runs until the file ``--stop-file`` appears, then stops every query and exits 0.
A query failing makes it exit 1 (except a Python worker too slow to start, see
``TRANSIENT``: that query is restarted from its checkpoint and the event logged).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


def emit(path: str, event: str, **fields: object) -> None:
    line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    print(f"[pipeline] {line}", flush=True)


def probe(_: object) -> tuple[str, int, str, str, str, str]:
    import pyarrow

    import pyspark_quiver
    import quiver_spark

    return (
        socket.gethostname(),
        os.getpid(),
        sys.executable,
        quiver_spark.__file__,
        pyspark_quiver.__file__,
        pyarrow.__file__,
    )


def producer_done(ckpt: Path, total: int) -> bool:
    """Whether the producer's last committed batch ended at or past ``total`` rows."""
    commits = ckpt / "commits"
    done = [int(p.name) for p in commits.glob("*") if p.name.isdigit()] if commits.is_dir() else []
    if not done:
        return False
    lines = (ckpt / "offsets" / str(max(done))).read_text().splitlines()
    return int(json.loads(lines[-1])["offset"]) >= total


def wait_for_progress(query: StreamingQuery, timeout_s: float) -> None:
    """Wait (bounded) until ``query`` finished a batch, failed, or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.isActive and query.lastProgress is None:
        time.sleep(0.5)


def wait_for_schema(
    spark: SparkSession,
    store: str,
    events: str,
    options: dict[str, str],
    timeout_s: float = 600,
) -> None:
    """Wait (bounded) until the producer's first batch recorded the store's schema.

    A subscriber's stream takes its schema from the store; the subscribers
    themselves are registered beforehand (``quiver subscribers PATH add NAME
    --create``), so nothing is reclaimed before they start reading. ``options`` are
    the read's options (an object root's ``storage.<key>`` settings); the first error
    of each kind is logged as an event.
    """
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while True:
        try:
            schema = spark.read.format("quiver").options(**options).load(store).schema
            emit(events, "schema", fields=schema.fieldNames())
            return
        except Exception as e:  # AnalysisException wrapping "no schema yet"
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            if first not in seen:
                seen.add(first)
                emit(events, "schema_wait", error=first)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no schema in {store} after {timeout_s}s: {e}") from e
            time.sleep(1.0)


TRANSIENT = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
"""Query start-up failures of an overloaded machine (Spark waits 10 s for a Python
worker to start): the query is restarted from its checkpoint, at most 5 times, and
the restart is logged. Every other failure ends the job with exit code 1."""


def restartable(error: str, restarts: int) -> bool:
    return restarts < 5 and any(t in error for t in TRANSIENT)


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

    import pyarrow

    import pyspark_quiver
    import quiver_spark

    emit(
        a.events,
        "start",
        python=sys.executable,
        quiver_spark=quiver_spark.__file__,
        pyspark_quiver=pyspark_quiver.__file__,
        pyarrow=pyarrow.__file__,
        sys_path=sys.path,
    )
    spark = SparkSession.builder.appName("quiver-integration-pipeline").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    parallelism = max(2, spark.sparkContext.defaultParallelism * 2)
    seen = spark.sparkContext.parallelize(range(parallelism), parallelism).map(probe).collect()
    emit(a.events, "probe", executors=sorted({tuple(x) for x in seen}))

    ckpt = Path(a.ckpt)

    def start_producer() -> StreamingQuery:
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
            .trigger(processingTime=f"{a.producer_trigger} seconds")
        )
        for k, v in kv(a.sink_option).items():
            writer = writer.option(k, v)
        return writer.start(a.store)

    def subscriber(name: str, trigger_s: str, max_segments: str) -> Callable[[], StreamingQuery]:
        def start() -> StreamingQuery:
            reader = (
                spark.readStream.format("quiver")
                .option("subscriber", name)
                .option("includeMetadata", "true")
                .option("maxSegmentsPerTrigger", max_segments)
            )
            for k, v in kv(a.source_option).items():
                reader = reader.option(k, v)
            return (
                reader.load(a.store)
                .writeStream.format("parquet")
                .queryName(name)
                .option("checkpointLocation", str(ckpt / name))
                .option("path", str(Path(a.out) / name))
                .trigger(processingTime=f"{trigger_s} seconds")
                .start()
            )

        return start

    starters: dict[str, Callable[[], StreamingQuery]] = {}
    queries: dict[str, StreamingQuery] = {}
    if producer_done(ckpt / "producer", a.total):
        emit(a.events, "producer_done", already=True)
    else:
        starters["producer"] = start_producer
        queries["producer"] = start_producer()
    wait_for_schema(spark, a.store, a.events, kv(a.source_option))
    for spec in a.subscriber:
        name, trigger_s, max_segments = spec.split(":")
        starters[name] = subscriber(name, trigger_s, max_segments)
        queries[name] = starters[name]()
        wait_for_progress(queries[name], 10)  # one Python worker start at a time
    emit(a.events, "running", queries=sorted(queries))

    deadline = time.monotonic() + a.max_runtime
    restarts: dict[str, int] = {}
    status = 0
    while time.monotonic() < deadline and not os.path.exists(a.stop_file):
        time.sleep(0.5)
        failed = {
            n: str(q.exception())
            for n, q in queries.items()
            if not q.isActive and q.exception() is not None
        }
        fatal = {n: e for n, e in failed.items() if not restartable(e, restarts.get(n, 0))}
        if fatal:
            emit(a.events, "query_failed", failed=fatal)
            status = 1
            break
        for n, e in failed.items():  # a slow Python start, not a Quiver failure
            restarts[n] = restarts.get(n, 0) + 1
            emit(a.events, "query_restarted", query=n, attempt=restarts[n], error=e[:300])
            queries[n] = starters[n]()
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
