"""A damaged ack log never stops a writer's appends (ARCHITECTURE.md §22, ack log row).

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
import time
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import (
    QuiverStore,
    RetentionConfig,
    SegmentConfig,
    SizeCapPolicy,
    StoreAtCapacityError,
    StoreConfig,
)
from quiver_spark.errors import CorruptionError
from quiver_spark.subscription import Subscription
from tests.child import run_python
from tests.damage import flip_byte

CAPPED = StoreConfig(
    retention=RetentionConfig(size_cap_bytes=1 << 30, backpressure_timeout_s=0.5),
    segment=SegmentConfig(max_open_duration_s=3600),
)
AS_RECORDED = StoreConfig(  # the store's recorded policy, a short wait when throttled
    retention=RetentionConfig(backpressure_timeout_s=0.5),
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


def _held_bytes(root: str) -> int:
    with QuiverStore.open(root, partition=None, create=False, background=False) as s:
        return sum(m.size_bytes for m in s.segments()) + sum(s.wal_bytes().values())


def _damaged_ack_log(root: str) -> str:
    logs = sorted(n for n in os.listdir(os.path.join(root, "subscribers")) if n.startswith("ack-"))
    return os.path.join(root, "subscribers", logs[-1])


def _segments_nobody_read(root: str, n: int) -> list[int]:
    """``n`` more segments, written after the damage (nobody acknowledged them)."""
    with QuiverStore.open(root, AS_RECORDED, background=False) as store:
        for _ in range(n):
            store.append(pa.record_batch({"k": pa.array([5, 6], pa.int64())}))
            store.finalize()
        return [m.seq for m in store.segments()]


def _capped_just_above(root: str, room: int) -> None:
    """The store's size cap set ``room`` bytes above what it holds now."""
    with QuiverStore.open(root, partition=None, create=False, background=False) as s:
        s.set_policy({"retention.size_cap": _held_bytes(root) + room})


def test_a_writer_over_the_cap_is_throttled_naming_the_damaged_ack_log_not_a_full_store(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    before = _segments_nobody_read(root, 2)
    _capped_just_above(root, 4000)
    with QuiverStore.open(root, AS_RECORDED, background=False) as store:
        store.append(pa.record_batch({"k": pa.array(range(100), pa.int64())}))  # 800 B: room
        with pytest.raises(StoreAtCapacityError) as err:
            for _ in range(10):
                store.append(pa.record_batch({"k": pa.array(range(100), pa.int64())}))
        message = str(err.value)
        assert "nothing can be reclaimed while the subscribers' ack log cannot be read" in message
        assert _damaged_ack_log(root) in message
        assert "salvage=True" in message
        store.flush()
        assert [m.seq for m in store.segments()][: len(before)] == before  # nothing deleted


def test_drop_oldest_deletes_nothing_while_the_ack_log_is_damaged(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    before = _segments_nobody_read(root, 2)
    with QuiverStore.open(root, partition=None, create=False, background=False) as s:
        s.set_policy(
            {"retention.size_cap": 100, "retention.size_cap_policy": SizeCapPolicy.DROP_OLDEST}
        )
    with QuiverStore.open(root, AS_RECORDED, background=False) as store:
        store.append(pa.record_batch({"k": pa.array([4], pa.int64())}))
        assert store.finalize() is not None
        assert isinstance(store.maintenance_error, CorruptionError)  # kept, not raised
        assert [m.seq for m in store.segments()][: len(before)] == before


def test_the_time_window_deletes_nothing_while_the_ack_log_is_damaged(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    before = _segments_nobody_read(root, 2)
    with QuiverStore.open(root, partition=None, create=False, background=False) as s:
        s.set_policy({"retention.max_age": 1 / 3600})  # one second
    with QuiverStore.open(root, AS_RECORDED, background=False) as store:
        with pytest.raises(CorruptionError):
            store.run_retention(now_ns=time.time_ns() + 3600 * 10**9)
        store.append(pa.record_batch({"k": pa.array([4], pa.int64())}))
        assert store.finalize() is not None
        assert [m.seq for m in store.segments()][: len(before)] == before


WRITER_OVER_THE_CAP = """
    import pyarrow as pa
    from quiver_spark import QuiverStore, RetentionConfig, StoreAtCapacityError, StoreConfig
    cfg = StoreConfig(retention=RetentionConfig(backpressure_timeout_s=0.5))
    with QuiverStore.open(root, cfg, background=False) as s:
        admitted = 0
        try:
            for _ in range(10):
                s.append(pa.record_batch({"k": pa.array(range(100), pa.int64())}))
                admitted += 1
        except StoreAtCapacityError as e:
            print(admitted, e, sep="\\n")
        s.flush()
"""


def test_a_writer_process_over_the_cap_is_throttled_naming_the_damaged_ack_log(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _store_with_damaged_ack_log(root)
    _capped_just_above(root, 4000)
    run = run_python(WRITER_OVER_THE_CAP, capture=True, root=root)
    admitted, message = run.stdout.strip().splitlines()
    assert 1 <= int(admitted) < 10  # within the cap: admitted; over it: throttled
    assert message.startswith(f"store {root} holds ")
    assert "nothing can be reclaimed while the subscribers' ack log cannot be read" in message
    assert _damaged_ack_log(root) in message
