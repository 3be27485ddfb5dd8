"""Child process for the kill -9 test: a source query with its own SparkSession.

Usage: python -m tests.spark.source_kill_child ROOT CHECKPOINT OUT [CATCH_UP_ORDER]
Runs until killed; the parent kills the whole process group with SIGKILL.
"""

from __future__ import annotations

import sys

from tests.spark_session import child_session


def main(root: str, ckpt: str, out: str, order: str = "oldest") -> None:
    spark = child_session("quiver-source-kill-child", ckpt)
    spark.sparkContext.setLogLevel("ERROR")
    (
        spark.readStream.format("quiver")
        .option("subscriber", "k")
        .option("maxSegmentsPerTrigger", "1")
        .option("catchUpOrder", order)
        .load(root)
        .writeStream.format("parquet")
        .option("checkpointLocation", ckpt)
        .trigger(processingTime="100 milliseconds")
        .start(out)
        .awaitTermination()
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
