"""The one SparkSession recipe the Spark tests and the scenario tests share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(scratch: Path, app: str, *, master: str, driver_memory: str) -> Any:
    """A local SparkSession with the settings the tests assume (UTC, pushdown on,
    small shuffles, no UI), spilling into ``scratch``.

    Its JVM compiles with C1 only and collects with the serial collector: on a 2-core
    machine a test's JVM is short-lived and shares the cores with other tests, and the
    session's tests took 10 % less CPU with both (454 against 408 CPU-seconds, run
    alone one after the other); what the tests check does not depend on either."""
    from pyspark.sql import SparkSession

    os.environ["TMPDIR"] = str(scratch)
    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(scratch))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def child_session(app: str, beside: str) -> Any:
    """The session of a driver a test runs as its own process (and kills): local[2],
    1 GB, spilling into a new directory beside ``beside`` (its checkpoint), inside the
    test's own directory."""
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="spark-", dir=Path(beside).parent))
    return local_session(scratch, app, master="local[2]", driver_memory="1g")
