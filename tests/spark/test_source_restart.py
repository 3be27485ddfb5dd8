"""kill -9 of a whole driver (JVM, planning process, workers) and restart from checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .source_helpers import (
    checkpoint_offsets,
    committed_batches,
    registry_hwm,
    wait_until,
    write_segments,
)

REPO = Path(__file__).resolve().parents[2]


def test_source_killed_mid_stream_restarts_without_loss_or_duplicates(spark, tmp_path):
    root, ckpt, out = str(tmp_path / "store"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    write_segments(root, 12)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.source_kill_child", root, ckpt, out],
        cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: len(committed_batches(ckpt)) >= 4, timeout_s=180,
                   what="four committed micro-batches in the child")
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    done = committed_batches(ckpt)
    assert len(done) < 12, "the child finished before the kill: nothing was interrupted"
    offsets = checkpoint_offsets(ckpt)
    # acks follow Spark's commit log: never ahead of the last committed batch's end
    assert registry_hwm(root, "k") <= offsets[done[-1]]["p-0"]

    q = (spark.readStream.format("quiver").option("subscriber", "k")
         .option("maxSegmentsPerTrigger", "4").load(root)
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out))
    assert q.awaitTermination(180) and q.exception() is None
    keys = sorted(r.k for r in spark.read.parquet(out).select("k").collect())
    assert keys == list(range(120)), "lost or duplicated rows after the restart"
    assert registry_hwm(root, "k") <= checkpoint_offsets(ckpt)[committed_batches(ckpt)[-1]]["p-0"]
