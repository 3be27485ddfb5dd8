"""``subscriber.expire_after`` counts from when a subscriber was last live or last
acknowledged, whichever is later: a caught-up consumer that had nothing to acknowledge
for longer than that (a quiet weekend) is not expired when its query stops for a
redeploy. Its record (§13.8) keeps ``last_live_ns``; records written before that field
existed still read.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark import format as fmt
from quiver_spark.objects.local import LocalObjects
from quiver_spark.options import store_config_from_options
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from tests.storage_time import time_passes
from tests.stores import int_segments

HOUR_NS = 3600 * 10**9
DAY_NS = 24 * HOUR_NS


def fill(root: Path, n: int) -> None:
    cfg = store_config_from_options(
        {"segment.max_open_duration": "60s", "subscriber.expire_after": "1d"}
    )
    int_segments(root, [(i, 1) for i in range(n)], config=cfg)


def handle(root: Path) -> QuiverStore:
    return QuiverStore.open(
        str(root), StoreConfig(segment=SegmentConfig(max_open_duration_s=60)), partition=None,
        background=False,
    )  # fmt: skip


def _age_last_ack(root: Path, name: str, by_ns: int) -> None:
    """The subscriber's last acknowledgement (and registration) ``by_ns`` ago, by the
    times its record shows and by the storage's clock, which expiry goes by."""
    io = handle(root).io
    rec = records.read_record(LocalObjects(str(root), io), name)
    assert rec is not None
    old = time.time_ns() - by_ns
    records.write_record(
        LocalObjects(str(root), io), dataclasses.replace(rec, created_ns=old, last_ack_ns=old)
    )
    time_passes(root, by_ns / 1e9)


def test_a_caught_up_subscriber_is_not_expired_right_after_its_consumer_stops(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 2)
    with Subscription.open(str(tmp_path), "quiet") as sub:
        sub.ack(sub.next_batch_end(sub.start()))  # caught up
        _age_last_ack(tmp_path, "quiet", 3 * DAY_NS)  # ... then a quiet weekend, live
        with handle(tmp_path) as s:
            assert s.run_retention().expired == []
    # the query stops for a redeploy; the next pass must not expire it
    with handle(tmp_path) as s:
        assert s.run_retention().expired == []
        assert s.subscribers.subscribers() == ["quiet"]
        # idle for longer than expire_after after it was last live: expired
        time_passes(tmp_path, (DAY_NS + HOUR_NS) / 1e9)
        assert s.run_retention().expired == ["quiet"]


def test_a_pass_that_sees_a_consumer_live_records_when(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    with Subscription.open(str(tmp_path), "seen") as sub:
        sub.start()
        _age_last_ack(tmp_path, "seen", 3 * DAY_NS)
        now = time.time_ns()
        with handle(tmp_path) as s:
            s.run_retention(now_ns=now)
            rec = records.read_record(LocalObjects(str(tmp_path), s.io), "seen")
            assert rec is not None and rec.last_live_ns == now
            assert rec.last_active_ns == now


def test_a_record_written_before_last_live_existed_still_reads(tmp_path: Path) -> None:
    body = {"name": "old", "created_ns": 5, "last_ack_ns": 7, "expired_ns": None,
            "expired_after_s": None}  # fmt: skip
    raw = fmt.encode_frame(fmt.MAGIC_SUBSCRIPTION, body)
    rec = records.SubscriptionRecord.from_body("x", fmt.decode_frame("x", b"QSUB", raw))
    assert rec.last_live_ns is None and rec.last_active_ns == 7


CONSUMER = """
    from quiver_spark.subscription import Subscription
    with Subscription.open(root, "weekend") as sub:
        sub.ack(sub.next_batch_end(sub.start()))
        print("caught up", flush=True)
        input()  # live until the test lets it stop
"""


def test_a_consumer_process_that_stops_after_a_quiet_weekend_survives_quiver_gc(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 2)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    consumer = subprocess.Popen(
        [sys.executable, "-c", f"root = {str(tmp_path)!r}\n" + textwrap.dedent(CONSUMER)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    assert consumer.stdout is not None and consumer.stdin is not None
    assert consumer.stdout.readline().strip() == "caught up"
    _age_last_ack(tmp_path, "weekend", 3 * DAY_NS)  # nothing new to acknowledge since
    consumer.stdin.write("\n")
    consumer.stdin.flush()
    assert consumer.wait(timeout=60) == 0  # the query stops for a redeploy
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "gc", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    with handle(tmp_path) as s:
        assert s.subscribers.subscribers() == ["weekend"], out.stdout
        rec = records.read_record(LocalObjects(str(tmp_path), s.io), "weekend")
        assert rec is not None and rec.expired_ns is None
