"""Metrics registry, stats gauges and the Prometheus textfile."""

from __future__ import annotations

import os

import pytest

from quiver_spark import metrics as m
from quiver_spark.gauges import observe
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from tests.engine.subscriber_helpers import MemCatalog


def test_counters_add_and_gauges_set_per_label_set():
    reg = m.Metrics()
    reg.inc(m.GC_EVICTIONS, 2, reason="size")
    reg.inc(m.GC_EVICTIONS, reason="size")
    reg.inc(m.GC_EVICTIONS, reason="time")
    reg.set(m.PARTITION_BYTES, 10, partition="p-0")
    reg.set(m.PARTITION_BYTES, 7, partition="p-0")
    assert reg.get(m.GC_EVICTIONS, reason="size") == 3
    assert reg.total(m.GC_EVICTIONS) == 4
    assert reg.get(m.PARTITION_BYTES, partition="p-0") == 7
    snap = reg.snapshot()
    assert snap[m.GC_EVICTIONS]["type"] == "counter"
    assert {"labels": {"reason": "time"}, "value": 1} in snap[m.GC_EVICTIONS]["series"]
    with pytest.raises(ValueError):
        reg.inc(m.GC_EVICTIONS, -1)


def test_prometheus_textfile_uses_underscores_escapes_labels_and_replaces_atomically(tmp_path):
    reg = m.Metrics()
    reg.inc(m.SUBSCRIBER_DROPPED, 3, subscriber='we"ird')
    reg.set(m.LAG_SECONDS, 1.5, subscriber="a")
    reg.inc(m.INGEST_THROTTLE)
    path = str(tmp_path / "quiver.prom")
    reg.write_prometheus_textfile(path)
    text = open(path).read()
    assert "# TYPE quiver_subscriber_dropped_segments_total counter" in text
    assert "# HELP quiver_subscriber_dropped_segments_total Segments recorded dropped" in text
    assert 'quiver_subscriber_dropped_segments_total{subscriber="we\\"ird"} 3.0' in text
    assert 'quiver_subscriber_lag_seconds{subscriber="a"} 1.5' in text
    assert "quiver_ingest_throttle_total 1.0" in text
    assert os.listdir(tmp_path) == ["quiver.prom"]  # no temp file left behind


def test_observe_publishes_lag_gap_sizes_and_ack_log_depth(tmp_path):
    cat = MemCatalog()
    for t in range(4):
        cat.add("p-0", 100, t * 1_000_000_000)
    reg = SubscriberRegistry.open(str(tmp_path))
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [1, 3], Outcome.ACK)
    met = m.Metrics()
    listing = {p: cat.list(p) for p in cat.partitions()}
    observe(met, reg, listing, now_ns=10_000_000_000, wal_bytes={"p-0": 5}, open_bytes={"p-0": 7})
    assert met.get(m.LAG_SEGMENTS, subscriber="a") == 2
    assert met.get(m.LAG_BYTES, subscriber="a") == 200
    assert met.get(m.LAG_SECONDS, subscriber="a") == pytest.approx(9.0)  # seg 2 at t=1s
    assert met.get(m.GAP_SET_SIZE, subscriber="a", partition="p-0") == 1
    assert met.get(m.ACKLOG_DEPTH_RECORDS) == reg.stats()["acklog"]["records_since_checkpoint"]
    assert met.get(m.ACKLOG_DEPTH_RECORDS) > 0
    assert met.get(m.WAL_BYTES, partition="p-0") == 5
    assert met.get(m.OPEN_SEGMENT_BYTES, partition="p-0") == 7
    reg.close()
