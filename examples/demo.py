"""``make demo``: a real streaming pipeline into and out of Quiver, narrated.

1. Registers two subscribers on a new local store (``quiver subscribers add``).
2. A producer stream (Spark's ``rate`` source) writes into the ``quiver`` sink.
3. ``quiver status`` shows segments waiting for both subscribers.
4. ``parquet_exporter`` drains the store into Parquet; ``slow_forwarder`` reads one
   segment per trigger and stops half-way: status shows its lag, and the
   segments it still needs are retained although the exporter acked them.
5. ``slow_forwarder`` catches up; status shows the disk reclaimed.
6. Audits: every produced key reached each subscriber exactly once.

Run with ``make demo`` (or ``python examples/demo.py [--seconds N]`` with the package
installed). It lives outside the package: the wheel ships no demo.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _say(msg: str) -> None:
    print(f"\n\033[1m== {msg}\033[0m", flush=True)


def _quiver(*args: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *args], capture_output=True, text=True
    )
    sys.stdout.write(out.stdout)
    if out.returncode not in (0, 1):
        sys.stdout.write(out.stderr)


DAEMON_NOISE = "PySpark daemon failed to flush the output to the worker process:"
"""What PySpark's daemon prints (with a traceback) when a worker finishes a task after
the JVM stopped listening: a task of a stopped query. Harmless, and not ours."""


def _filter_daemon_noise() -> None:
    """Drop PySpark's daemon flush-failure tracebacks from this process's stderr.

    The JVM (and the Python daemon whose stderr it relays) writes to file descriptor
    2, which it inherits from this process, so fd 2 goes through a pipe and a thread
    that copies everything except a block that starts with :data:`DAEMON_NOISE` and
    ends in ``BrokenPipeError``/``ConnectionResetError``. A block that ends in any
    other error is copied whole: real errors still show.
    """
    real = os.dup(2)
    r, w = os.pipe()
    os.dup2(w, 2)
    os.close(w)

    def pump() -> None:
        held: list[bytes] = []  # a daemon block being read
        with os.fdopen(r, "rb") as src:
            for line in src:
                if not held and not line.startswith(DAEMON_NOISE.encode()):
                    os.write(real, line)
                    continue
                held.append(line)
                if len(held) > 1 and line[:1] not in (b" ", b"\t", b"T"):
                    # the exception line closes the block
                    if not line.startswith((b"BrokenPipeError", b"ConnectionResetError")):
                        os.write(real, b"".join(held))
                    held = []
            if held:
                os.write(real, b"".join(held))

    threading.Thread(target=pump, name="stderr-filter", daemon=True).start()


def _stop_between_batches(query: Any, timeout: float = 30.0) -> None:
    """Stop a streaming query while no micro-batch runs, so no task is cut off mid-write.

    ``stop()`` cancels a running batch's tasks; their Python workers then write to a
    socket the JVM has closed. Waiting for the gap between two triggers avoids that.
    """
    deadline = time.monotonic() + timeout
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def _session(work: Path) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = Path(__file__).resolve().parents[1] / "conf" / "log4j2.properties"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.local.dir", str(work / "spark-local"))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if conf.exists():
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={conf}"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _read_all(spark: Any, store: Path, ckpt: Path, sub: str, out: Path, **opts: str) -> None:
    """Everything ``sub`` has not acked, into Parquet, with Trigger.AvailableNow.

    Spark confirms the last batch of a run only when the next run plans from it, so
    a second (empty) run follows: it acknowledges that batch and frees its segments.
    """
    for _ in range(2):
        reader = spark.readStream.format("quiver").option("subscriber", sub)
        for k, v in opts.items():
            reader = reader.option(k, v)
        q = (
            reader.load(str(store))
            .writeStream.format("parquet")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start(str(out))
        )
        q.awaitTermination()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="quiver-demo")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long the producer runs")
    ap.add_argument("--rows-per-second", type=int, default=20_000)
    ap.add_argument("--dir", help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    work = Path(args.dir or tempfile.mkdtemp(prefix="quiver-demo-"))
    store, out = work / "store", work / "out"
    print(f"work directory: {work}")

    _say("1. Register two subscribers on a new store")
    _quiver("subscribers", str(store), "add", "--create", "parquet_exporter")
    _quiver("subscribers", str(store), "add", "--create", "slow_forwarder")

    _filter_daemon_noise()
    spark = _session(work)
    from pyspark.sql import functions as F

    _say(f"2. Producer: rate source -> quiver sink for {args.seconds:.0f} s")
    events = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", args.rows_per_second)
        .load()
        .select(
            F.col("value").alias("key"),
            F.col("timestamp").alias("event_time"),
            F.concat(F.lit("device-"), (F.col("value") % 97).cast("string")).alias("device"),
            (F.rand(seed=7) * 100).alias("reading"),
        )
    )
    producer = (
        events.writeStream.format("quiver")
        .option("checkpointLocation", str(work / "ckpt" / "producer"))
        .option("segment.max_open_duration", "1s")
        .option("segment.event_time_column", "event_time")
        .trigger(processingTime="1 second")
        .start(str(store))
    )
    # the first micro-batch into a Python sink takes several seconds (worker start):
    # run for --seconds and at least three batches that carried rows
    started = time.monotonic()
    while True:
        time.sleep(0.5)
        batches = [p for p in producer.recentProgress if p["numInputRows"] > 0]
        elapsed = time.monotonic() - started
        if (elapsed >= args.seconds and len(batches) >= 3) or elapsed > args.seconds + 240:
            break
    _stop_between_batches(producer)
    n_produced = sum(p["numInputRows"] for p in producer.recentProgress)
    time.sleep(1.5)  # the last committed batch passes segment.max_open_duration
    _quiver("gc", str(store))
    n_stored = spark.read.format("quiver").load(str(store)).count()
    print(
        f"producer committed {n_produced} rows in {len(producer.recentProgress)} "
        f"micro-batches; the store holds {n_stored} rows"
    )

    _say("3. Status: everything retained, both subscribers lag")
    _quiver("status", str(store))

    _say("4. parquet_exporter drains everything; slow_forwarder reads one segment per trigger")
    _read_all(spark, store, work / "ckpt" / "exporter", "parquet_exporter", out / "exporter")
    slow_opts = {"maxSegmentsPerTrigger": "1"}
    slow = (
        spark.readStream.format("quiver")
        .option("subscriber", "slow_forwarder")
        .option("maxSegmentsPerTrigger", "1")
        .load(str(store))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(work / "ckpt" / "slow"))
        .trigger(processingTime="2 seconds")
        .start(str(out / "slow"))
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # two segments read (the first acked): the rest waits
        if sum(p["numInputRows"] > 0 for p in slow.recentProgress) >= 2:
            break
        time.sleep(0.2)
    _stop_between_batches(slow)
    _quiver("gc", str(store))
    _say("   status: segments the exporter acked stay until slow_forwarder acks them too")
    _quiver("status", str(store))

    _say("5. slow_forwarder catches up; acknowledged segments are deleted")
    _read_all(spark, store, work / "ckpt" / "slow", "slow_forwarder", out / "slow", **slow_opts)
    _quiver("gc", str(store))
    _quiver("status", str(store))

    _say("6. Audit")
    ok = True
    for sub in ("exporter", "slow"):
        df = spark.read.parquet(str(out / sub))
        rows, keys = df.count(), df.select("key").distinct().count()
        dupes = rows - keys
        print(
            f"{sub:>9}: {rows} rows received, {keys} distinct keys, {dupes} duplicates, "
            f"{n_produced - keys} missing"
        )
        ok = ok and rows == keys == n_produced
    spark.stop()
    print(
        f"\nresult: {'exactly once for both subscribers' if ok else 'MISMATCH'}; "
        f"wall time {time.monotonic() - t_start:.0f} s"
    )
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
