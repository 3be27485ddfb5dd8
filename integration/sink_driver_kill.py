"""A streaming query into a Quiver store, run as its own driver so a test can kill -9 it.

Usage: ``python -m integration.sink_driver_kill INPUT_DIR STORE CHECKPOINT`` from the
checkout (its session is the tests' one recipe, ``tests/spark_session.py``). Reads
Parquet files (one file per micro-batch, 200 ms triggers) and writes them to the
quiver sink until killed. tests/spark/test_sink_driver_kill.py kills the whole
process group (driver, JVM, Python workers) with SIGKILL mid-stream and restarts the
query from the checkpoint in the test session.
"""

from __future__ import annotations

import os
import sys

SCHEMA = "k long, v string, ts timestamp"
SINK_OPTIONS = {"segment.max_open_duration": "300ms", "wal.flush_interval": "10ms"}


def main(argv: list[str]) -> int:
    src, root, ckpt = argv[1:4]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from tests.spark_session import child_session

    spark = child_session("quiver-sink-driver-kill", ckpt)
    spark.sparkContext.setLogLevel("ERROR")
    writer = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(src)
        .writeStream.format("quiver")
        .option("checkpointLocation", ckpt)
    )
    for k, v in SINK_OPTIONS.items():
        writer = writer.option(k, v)
    query = writer.trigger(processingTime="200 milliseconds").start(root)
    sys.stdout.write(f"query {query.id} started\n")
    sys.stdout.flush()
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
