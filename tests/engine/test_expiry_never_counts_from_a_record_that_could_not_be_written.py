"""A subscriber that acknowledged moments ago is never expired because its record was stale.

The subscription record is advisory for everything but expiry (§13.8): updates of it
that fail (a full disk) are logged and never fail an acknowledgement or a close. The
price of that must not be data: a consumer that acknowledged and stopped while its
record could not be rewritten is not expired by the first pass after space returns
as if it had been idle since the record's last successful write.
"""

from __future__ import annotations

import dataclasses
import errno
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark import format as fmt
from quiver_spark.cli import cli
from quiver_spark.objects.local import LocalObjects
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from tests.faults import FaultyIO
from tests.storage_time import HOUR_S, time_passes

HOUR_NS = 3600 * 10**9
EXPIRES_AFTER_AN_HOUR = StoreConfig(
    segment=SegmentConfig(max_open_duration_s=3600), subscriber_expire_after_s=3600
)


def test_a_consumer_that_acked_and_stopped_on_a_full_disk_is_not_expired_right_after(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, EXPIRES_AFTER_AN_HOUR, background=False) as writer:
        for _ in range(2):
            writer.append(pa.record_batch({"k": pa.array([1, 2, 3], pa.int64())}))
            writer.finalize()
    # registered two hours ago; its record has not been rewritten since
    records.create_record(LocalObjects(root, FaultyIO()), "c", time.time_ns() - 2 * HOUR_NS)
    time_passes(root, 2 * HOUR_S)
    io = FaultyIO()
    store = QuiverStore.open(root, partition=None, create=False, io=io, background=False)
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains=".sub")
    sub = Subscription(store, "c")
    sub.start()
    batch = sub.poll()
    assert batch is not None
    assert sub.ack(batch.end) == 2  # durable in the ack log; the record update fails
    sub.close()
    assert full.fired
    io.faults.remove(full)  # space returns
    result = store.run_retention()
    assert result.expired == []
    assert store.subscribers.subscribers() == ["c"]
    store.close()


def _written(root: str, n: int = 2) -> None:
    with QuiverStore.open(root, EXPIRES_AFTER_AN_HOUR, background=False) as writer:
        for _ in range(n):
            writer.append(pa.record_batch({"k": pa.array([1, 2, 3], pa.int64())}))
            writer.finalize()


def _handle(root: str) -> QuiverStore:
    return QuiverStore.open(root, partition=None, create=False, background=False)


def _ack_everything_on_a_full_disk(root: str) -> None:
    """A consumer registers normally, then acknowledges and stops while no ``.sub``
    write succeeds (its acknowledgements are durable in the ack log)."""
    io = FaultyIO()
    store = QuiverStore.open(root, partition=None, create=False, io=io, background=False)
    sub = Subscription(store, "c")
    sub.start()  # its record is written while there is space
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains=".sub")
    batch = sub.poll()
    assert batch is not None
    assert sub.ack(batch.end) == 2
    sub.close()
    store.close()
    assert full.fired


def test_a_new_process_finds_acknowledgements_its_record_missed_and_restarts_the_clock(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    _ack_everything_on_a_full_disk(root)
    time_passes(root, 2 * HOUR_S)  # its record's last write, two hours ago
    now = time.time_ns()
    with _handle(root) as fresh:  # nothing in memory of the failed writes
        assert fresh.run_retention(now_ns=now).expired == []
        rec = records.read_record(LocalObjects(root, fresh.io), "c")
        assert rec is not None and rec.progress_ns == now
        assert rec.last_active_ns == now
        time_passes(root, HOUR_S / 2)
        assert fresh.run_retention().expired == []
        # idle for the policy's hour since that progress was found: expired
        time_passes(root, HOUR_S / 2 + 60)
        assert fresh.run_retention().expired == ["c"]


def test_quiver_gc_after_space_returns_does_not_expire_a_consumer_that_acked_on_a_full_disk(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    _ack_everything_on_a_full_disk(root)
    with _handle(root) as s:  # its last successful record write, two hours ago
        rec = records.read_record(LocalObjects(root, s.io), "c")
        assert rec is not None
        old = time.time_ns() - 2 * HOUR_NS
        records.write_record(LocalObjects(root, s.io), dataclasses.replace(rec, created_ns=old))
    time_passes(root, 2 * HOUR_S)
    gc = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "gc", root],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert gc.returncode == 0, gc.stderr
    with _handle(root) as s:
        assert s.subscribers.subscribers() == ["c"], gc.stdout
        rec = records.read_record(LocalObjects(root, s.io), "c")
        assert rec is not None and rec.expired_ns is None


def test_a_pass_that_could_not_note_a_live_consumer_does_not_expire_it_on_the_old_record(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    io = FaultyIO()
    store = QuiverStore.open(root, partition=None, create=False, io=io, background=False)
    sub = Subscription(store, "c")
    sub.start()  # caught up or not, it acknowledges nothing
    rec = records.read_record(LocalObjects(root, io), "c")
    assert rec is not None
    records.write_record(
        LocalObjects(root, io), dataclasses.replace(rec, created_ns=rec.created_ns - 2 * HOUR_NS)
    )
    time_passes(root, 2 * HOUR_S)
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains=".sub")
    assert store.run_retention().expired == []  # live: noted, but the note is not written
    sub.close()  # its own note fails too
    io.faults.remove(full)
    assert store.run_retention().expired == []
    rec = records.read_record(LocalObjects(root, io), "c")
    assert rec is not None and rec.last_live_ns is not None  # the kept note, written now
    store.close()


def test_data_a_pass_drops_for_an_idle_subscriber_does_not_count_as_its_progress(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    with _handle(root) as s:
        s.set_policy({"retention.max_age": 0.5})  # half an hour
    with Subscription.open(root, "idle") as sub:
        sub.start()  # registered, never acknowledges
    now = time.time_ns()
    time_passes(root, HOUR_S / 2 + 60)
    with _handle(root) as s:
        dropped = s.run_retention(now_ns=now + HOUR_NS // 2 + 60 * 10**9).dropped
        assert set(dropped) == {"idle"}  # its data went by age; its record is rewritten
        time_passes(root, HOUR_S / 2)
        assert s.run_retention(now_ns=now + HOUR_NS + 60 * 10**9).expired == ["idle"]


def test_a_record_written_before_progress_existed_still_reads() -> None:
    body = {"name": "old", "created_ns": 5, "last_ack_ns": 7, "expired_ns": None,
            "expired_after_s": None, "last_live_ns": 9}  # fmt: skip
    raw = fmt.encode_frame(fmt.MAGIC_SUBSCRIPTION, body)
    rec = records.SubscriptionRecord.from_body("x", fmt.decode_frame("x", b"QSUB", raw))
    assert rec.progress is None and rec.progress_ns is None and rec.last_active_ns == 9


def test_a_subscriber_added_ahead_of_time_and_never_used_expires_one_period_later(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    added = CliRunner().invoke(cli, ["subscribers", root, "add", "typo"])
    assert added.exit_code == 0, added.output
    time_passes(root, HOUR_S + 60)
    with _handle(root) as s:
        assert s.run_retention().expired == ["typo"]


def test_a_record_from_before_progress_gets_a_fresh_clock_at_its_first_idle_check(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    _written(root)
    with _handle(root) as s:
        s.subscribers.register("old")
        body = {"name": "old", "created_ns": time.time_ns() - 2 * HOUR_NS, "last_ack_ns": None,
                "expired_ns": None, "expired_after_s": None}  # fmt: skip
        s.io.mkdir(records.records_dir(root))
        s.io.atomic_write(
            records.record_path(root, "old"), fmt.encode_frame(fmt.MAGIC_SUBSCRIPTION, body)
        )
        time_passes(root, 2 * HOUR_S)  # its last write, too
        assert s.run_retention().expired == []  # nothing says it was idle
        time_passes(root, HOUR_S + 60)
        assert s.run_retention().expired == ["old"]
