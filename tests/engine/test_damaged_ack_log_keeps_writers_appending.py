"""A damaged ack log never stops a writer's appends (ARCHITECTURE.md §11, ack log row).

While the ack log cannot be opened (a flipped byte before its last record), consumers,
status and gc fail naming it, but a writer's appends and finalizes go on. That holds
under a size cap with ``backpressure`` too: a store far below its cap admits a new
writer's batch; what the damage may do is keep segments (nothing can be reclaimed),
not refuse data the cap has room for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig
from quiver_spark.subscription import Subscription
from tests.damage import flip_byte

CAPPED = StoreConfig(
    retention=RetentionConfig(size_cap_bytes=1 << 30, backpressure_timeout_s=0.5),
    segment=SegmentConfig(max_open_duration_s=3600),
)


def _store_with_damaged_ack_log(root: str) -> None:
    with QuiverStore.open(root, CAPPED, background=False) as store:
        for _ in range(3):
            store.append(pa.record_batch({"k": pa.array([1, 2, 3], pa.int64())}))
            store.finalize()
    with Subscription.open(root, "c") as sub:
        sub.start()
        batch = sub.poll()
        assert batch is not None
        sub.ack(batch.end)
    logs = sorted(n for n in os.listdir(os.path.join(root, "subscribers")) if n.startswith("ack-"))
    flip_byte(os.path.join(root, "subscribers", logs[-1]), 32 + 5)  # its first record


def test_a_new_writer_appends_under_a_size_cap_while_the_ack_log_is_damaged(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    with QuiverStore.open(root, CAPPED, background=False) as store:
        store.append(pa.record_batch({"k": pa.array([4], pa.int64())}))
        store.flush()


def test_a_writer_process_appends_under_a_size_cap_while_the_ack_log_is_damaged(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    code = (
        "import pyarrow as pa\n"
        "from quiver_spark import QuiverStore, RetentionConfig, StoreConfig\n"
        "cfg = StoreConfig(retention=RetentionConfig(backpressure_timeout_s=0.5))\n"
        f"with QuiverStore.open({root!r}, cfg, background=False) as s:\n"
        "    s.append(pa.record_batch({'k': pa.array([4], pa.int64())}))\n"
        "    s.flush()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr.strip().splitlines()[-1:]
