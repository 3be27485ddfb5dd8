"""A new process (``quiver status``, ``quiver gc``, a restarted consumer) starts from
each partition's MANIFEST (ARCHITECTURE.md §11.1) and sees exactly what was published:
a segment whose writer was killed -9 between its ``.meta`` and its manifest step
included, segments retention deleted never again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..child import run_python

KILLED_AFTER_META = """
import os, signal, pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscribers import Outcome
cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
with QuiverStore.open(root, cfg, partition="p-0", background=False) as s:
    s.subscribers.register("r")
    for i in range(4):
        s.append(pa.record_batch({"id": pa.array([i], pa.int64())}))
        s.finalize()
    s.subscribers.record("r", "p-0", [1], Outcome.ACK)
    s.run_retention()
    def die(*_args):  # (partition, metas, txns, sealed_by, txn_floor)
        os.kill(os.getpid(), signal.SIGKILL)  # the .meta is durable; the manifest never hears of it
    s.segment_location.publication.manifest_step = die
    s.append(pa.record_batch({"id": pa.array([4], pa.int64())}))
    s.finalize()
"""

CONSUMER = """
from quiver_spark.subscription import Subscription
with Subscription.open(root, "r") as sub:
    batch = sub.poll()
    print(sorted(m.seq for m in batch.segments))
"""


def quiver(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *args, "--json"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    doc: dict = json.loads(out.stdout)
    return doc


def test_a_segment_published_just_before_a_kill_is_seen_and_deleted_ones_never_reappear(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "store")
    killed = run_python(KILLED_AFTER_META, check=False, capture=True, root=root)
    assert killed.returncode == -9, killed.stderr
    manifest = json.loads(
        run_python(
            "from quiver_spark.control.manifest import Manifest\n"
            "m = Manifest.decode('m', open(path, 'rb').read())\n"
            "print(m.seqs())",
            capture=True,
            path=str(tmp_path / "store" / "partitions" / "p-0" / "MANIFEST"),
        ).stdout
    )
    assert manifest == [2, 3, 4], "the killed publication is missing from the manifest"
    [p0] = quiver("status", root)["partitions"]
    assert (p0["segments"], p0["first_seq"], p0["last_seq"], p0["rows"]) == (4, 2, 5, 4)
    doc = quiver("gc", root, "--dry-run")
    assert doc["deleted"] == [] and doc["damaged"] == []
    seen = run_python(CONSUMER, capture=True, root=root).stdout.strip().splitlines()[-1]
    assert json.loads(seen) == [2, 3, 4, 5]
