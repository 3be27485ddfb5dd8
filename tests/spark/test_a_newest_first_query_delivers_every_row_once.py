"""A query reading newest first (``catchUpOrder=newest``) after an outage: its driver
killed (kill -9 of JVM, planning process and workers) mid catch-up, fresh data written
meanwhile, and restarted from its checkpoint with Trigger.AvailableNow, delivers
every row once; its first batch after each start is the newest data, and the ack log
never records the backlog it has not read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from quiver_spark.subscribers import SubscriberRegistry

from .source_helpers import committed_batches, wait_until, write_segments

REPO = Path(__file__).resolve().parents[2]


def raw_offsets(ckpt: str) -> dict[int, dict[str, Any]]:
    """Batch id -> the source's offset JSON, as Spark's offset log holds it."""
    d = os.path.join(ckpt, "offsets")
    out = {}
    for name in os.listdir(d):
        if name.isdigit():
            with open(os.path.join(d, name)) as f:
                out[int(name)] = json.loads(f.read().splitlines()[-1])
    return out


def test_a_driver_killed_mid_catch_up_resumes_newest_first_with_every_row_once(spark, tmp_path):
    root, ckpt, out = str(tmp_path / "store"), str(tmp_path / "ckpt"), str(tmp_path / "out")
    write_segments(root, 12)  # the backlog of an outage: seqs 1..12, keys 0..119
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.source_kill_child", root, ckpt, out, "newest"],
        cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: len(committed_batches(ckpt)) >= 3, timeout_s=180,
                   what="three committed micro-batches in the child")  # fmt: skip
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    done = committed_batches(ckpt)
    before = raw_offsets(ckpt)
    assert len(done) < 12, "the child finished before the kill: nothing was interrupted"
    # one segment per trigger: the newest first, then the backlog walked down
    assert before[0]["v"] == 3 and before[0]["segments"] == {"p-0": 12}
    assert before[0]["backlog"] == {"p-0": [1, 11]}
    assert before[1]["segments"] == {"p-0": 12} and before[1]["backlog"] == {"p-0": [1, 10]}
    # acknowledgements follow Spark's commit log, and never cover the unread backlog
    lo, hi = before[done[-1]]["backlog"]["p-0"]
    with SubscriberRegistry.open(root) as reg:
        assert not any(reg.is_done("k", "p-0", s) for s in range(lo, hi + 1))
        assert reg.hwm("k", "p-0") == 0

    write_segments(root, 3, first_key=120)  # fresh data while the query is down: 13..15
    q = (spark.readStream.format("quiver").option("subscriber", "k")
         .option("catchUpOrder", "newest").option("maxSegmentsPerTrigger", "4").load(root)
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out))  # fmt: skip
    assert q.awaitTermination(180) and q.exception() is None
    keys = sorted(r.k for r in spark.read.parquet(out).select("k").collect())
    assert keys == list(range(150)), "lost or duplicated rows after the restart"
    after = raw_offsets(ckpt)
    first = max(before) + 1  # the first batch the restarted query planned
    assert after[first]["segments"] == {"p-0": 15} and after[first]["backlog"], after[first]
    last = after[max(after)]
    assert last["v"] == 2 and last["segments"] == {"p-0": 15}  # the cursors met
