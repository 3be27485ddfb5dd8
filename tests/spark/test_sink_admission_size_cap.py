"""Spark tasks on fresh Python workers respect the size cap under ``backpressure``.

With ``spark.python.worker.reuse=false`` every task opens a new store handle; each one
checks the store's bytes before admitting its first batch, so batch writes against a
store over its cap are refused (retryable ``StoreAtCapacityError``) instead of all
being admitted: usage stays within one batch of the cap (ARCHITECTURE.md §15.2). The
job runs in its own Spark application (a separate conf from the shared session).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig

CAP = 40 * 1024
ROWS = 2250  # one 18,000-byte int64 batch per write
WRITES = 5  # three fit under the cap (the third takes it over); the last two are refused

JOB = """
import os, sys
from tests.spark_session import local_session
from pathlib import Path
spark = local_session(Path(scratch), "admission", master="local[2]", driver_memory="1g")
assert spark.sparkContext.getConf().get("spark.python.worker.reuse") == "false"
spark.sparkContext.setLogLevel("OFF")
accepted = 0
for i in range(writes):
    df = spark.range(i * rows, (i + 1) * rows).repartition(1)
    try:
        (df.write.format("quiver").mode("append")
           .option("segment.target_size", "20KB")
           .option("retention.backpressure_timeout", "1s")
           .save(root))
        accepted += 1
    except Exception as e:
        if "StoreAtCapacityError" not in str(e) and "size_cap" not in str(e):
            raise
print("accepted", accepted, flush=True)
spark.stop()
"""


def test_batch_writes_on_fresh_python_workers_stay_within_one_batch_of_the_cap(
    tmp_path: Path,
) -> None:
    root = tmp_path / "q"
    cfg = StoreConfig(
        segment=SegmentConfig(target_size_bytes=20 * 1024),
        retention=RetentionConfig(size_cap_bytes=CAP),
    )
    with QuiverStore.open(str(root), cfg, partition=None) as store:
        store.subscribers.register("never")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(
        os.environ, PYTHONPATH=os.getcwd(), PYSPARK_PYTHON=sys.executable,
        PYSPARK_SUBMIT_ARGS="--conf spark.python.worker.reuse=false pyspark-shell",
    )  # fmt: skip
    code = (
        f"root, scratch, rows, writes = {str(root)!r}, {str(scratch)!r}, {ROWS}, {WRITES}\n" + JOB
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    accepted = int(out.stdout.split()[-1])
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        usage = sum(m.size_bytes for m in s.segments()) + sum(s.wal_bytes().values())
    assert usage <= CAP + ROWS * 8 + 2048, (usage, accepted)
    assert 2 <= accepted < WRITES, (usage, accepted)
