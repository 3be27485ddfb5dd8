"""Driver kill -9 mid-stream, restart from the checkpoint: every key exactly once (G6)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, wait_for_rows, write_input_files

REPO = Path(__file__).resolve().parents[2]
"""The checkout: the driver runs as ``python -m integration.sink_driver_kill`` from it."""


def _committed_batches(root: str) -> int:
    commits = os.path.join(root, "commits")
    if not os.path.isdir(commits):
        return 0
    return sum(len(os.listdir(os.path.join(commits, app))) for app in os.listdir(commits))


def test_driver_killed_mid_stream_then_restarted_writes_every_key_exactly_once(spark, tmp_path):
    src, root, ckpt = str(tmp_path / "in"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    keys = write_input_files(src, files=8, rows=25)
    log = open(tmp_path / "driver.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "integration.sink_driver_kill", src, root, ckpt],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        deadline = time.monotonic() + 240
        while _committed_batches(root) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, open(tmp_path / "driver.log").read()[-3000:]
            time.sleep(0.05)
        assert _committed_batches(root) >= 2, "the stream never committed 2 batches"
        time.sleep(random.uniform(0.05, 0.3))  # somewhere inside a later micro-batch
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # driver, its JVM and every Python worker
        proc.wait(30)
        log.close()
    done_before_kill = _committed_batches(root)
    assert done_before_kill < 8, "the stream finished before the kill: nothing was tested"

    writer = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 100)  # the replayed batch, then the rest at once
        .parquet(src)
        .writeStream.format("quiver")
        .option("checkpointLocation", ckpt)
    )
    for k, v in FAST.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(root)
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()

    table = wait_for_rows(root, len(keys))
    assert_exactly_once(table, keys)
    assert _committed_batches(root) >= done_before_kill + 1
