"""Subscribers have a visible life: registered, last acknowledged, live, expired."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.cli import cli
from quiver_spark.cli.status import collect_status
from quiver_spark.errors import SubscriberError
from quiver_spark.objects.local import LocalObjects
from quiver_spark.options import store_config_from_options
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.storage_time import HOUR_S, time_passes
from tests.stores import int_segments

HOUR_NS = 3600 * 10**9


def fill(root: Path, n: int, **options: str) -> None:
    cfg = store_config_from_options({"segment.max_open_duration": "60s", **options})
    int_segments(root, [(i, 1) for i in range(n)], config=cfg)


def handle(root: Path) -> QuiverStore:
    return QuiverStore.open(
        str(root), StoreConfig(segment=SegmentConfig(max_open_duration_s=60)), partition=None,
        background=False,
    )  # fmt: skip


def test_an_idle_subscriber_expires_releases_its_segments_and_fails_clearly(tmp_path: Path) -> None:
    fill(tmp_path, 3, **{"subscriber.expire_after": "2h"})
    with Subscription.open(str(tmp_path), "idle") as idle:
        idle.start()  # registered, never acknowledges
    with Subscription.open(str(tmp_path), "busy") as busy:
        busy.ack(busy.next_batch_end(busy.start()))
    with handle(tmp_path) as s:
        time_passes(tmp_path, HOUR_S)  # by the storage's clock, which expiry goes by
        assert s.run_retention().expired == []  # not idle long enough
        assert len(s.segments()) == 3  # pinned by "idle"
        time_passes(tmp_path, 2 * HOUR_S)
        records.touch(LocalObjects(str(tmp_path), s.io), "busy")  # busy acks on
        result = s.run_retention()
        assert result.expired == ["idle"]
        assert s.subscribers.subscribers() == ["busy"]
        s.run_retention()
        assert s.segments() == []  # released: "busy" had acknowledged everything
    rec = records.read_record(LocalObjects(str(tmp_path), handle(tmp_path).io), "idle")
    assert rec is not None and rec.expired_ns is not None and rec.expired_after_s == 7200
    with Subscription.open(str(tmp_path), "idle") as idle:
        with pytest.raises(SubscriberError, match=r"expired at .* subscriber\.expire_after") as err:
            idle.start()
        assert f"quiver subscribers {tmp_path} add idle" in str(err.value)
    # adding it again starts it over
    res = CliRunner().invoke(cli, ["subscribers", str(tmp_path), "add", "idle"])
    assert res.exit_code == 0, res.output
    with Subscription.open(str(tmp_path), "idle") as idle:
        idle.start()
        assert idle.registered()


def test_a_live_consumer_is_never_expired(tmp_path: Path) -> None:
    fill(tmp_path, 1, **{"subscriber.expire_after": "1h"})
    with Subscription.open(str(tmp_path), "slow") as slow:
        slow.start()
        time_passes(tmp_path, 5 * HOUR_S)
        with handle(tmp_path) as s:
            assert s.run_retention().expired == []
            assert s.subscribers.subscribers() == ["slow"]


def test_a_subscriber_from_before_records_gets_a_fresh_clock(tmp_path: Path) -> None:
    fill(tmp_path, 1, **{"subscriber.expire_after": "1h"})
    with handle(tmp_path) as s:
        s.subscribers.register("old")  # no record, as in a store written before them
        assert s.run_retention().expired == []
        assert records.read_record(LocalObjects(str(tmp_path), s.io), "old") is not None
        time_passes(tmp_path, 2 * HOUR_S)
        assert s.run_retention().expired == ["old"]


def test_status_shows_last_ack_liveness_and_warns_about_idle_pinning(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    with Subscription.open(str(tmp_path), "reader") as r:
        r.start()
        r.ack(Position({"p-0": 1}))
        with handle(tmp_path) as s:
            doc = collect_status(s, time.time_ns())
            (sub,) = doc["subscribers"]
            assert sub["live"] is True and sub["last_ack_ns"] is not None
            assert sub["pinning_idle"] is False
    with handle(tmp_path) as s:
        later = collect_status(s, time.time_ns() + 2 * HOUR_NS)
        (sub,) = later["subscribers"]
        assert sub["live"] is False and sub["lag_segments"] == 1 and sub["pinning_idle"] is True
    out = CliRunner().invoke(cli, ["subscribers", str(tmp_path), "list"]).output
    assert "LAST ACK" in out and "reader" in out


def test_removing_an_expired_subscriber_clears_its_record(tmp_path: Path) -> None:
    fill(tmp_path, 1, **{"subscriber.expire_after": "1h"})
    with Subscription.open(str(tmp_path), "gone") as g:
        g.start()
    time_passes(tmp_path, 2 * HOUR_S)
    with handle(tmp_path) as s:
        assert s.run_retention().expired == ["gone"]
    res = CliRunner().invoke(cli, ["subscribers", str(tmp_path), "remove", "gone"])
    assert res.exit_code == 0, res.output
    with handle(tmp_path) as s:
        assert records.read_record(LocalObjects(str(tmp_path), s.io), "gone") is None
    with Subscription.open(str(tmp_path), "gone") as g:  # a new subscriber by that name
        g.start()
        assert g.registered()
