"""A query with ``acceptanceHorizon`` (newest first, as a telemetry exporter back from
an outage reads): segments whose newest row was ingested longer ago than the horizon
are recorded ``dropped`` for its subscriber, never delivered; newer ones are delivered
once; each batch's offset holds the cutoff it was planned with; a restart from the
checkpoint delivers nothing again; ``quiver status`` names what was dropped."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.status import collect_status
from quiver_spark.subscribers import SubscriberRegistry

from .source_helpers import ROWS_PER_SEGMENT, Collector, run_available_now, stream, write_segments

DAY_NS = 86_400 * 10**9


def raw_offsets(ckpt: str) -> dict[int, dict[str, Any]]:
    d = os.path.join(ckpt, "offsets")
    out = {}
    for name in os.listdir(d):
        if name.isdigit():
            with open(os.path.join(d, name)) as f:
                out[int(name)] = json.loads(f.read().splitlines()[-1])
    return out


def test_a_query_drops_segments_past_its_horizon_and_delivers_the_rest_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    real = time.time_ns
    with monkeypatch.context() as m:  # the outage's rows, ingested two days ago
        m.setattr(time, "time_ns", lambda: real() - 2 * DAY_NS)
        write_segments(root, 4)  # seqs 1..4, keys 0..39
    write_segments(root, 3, first_key=40)  # seqs 5..7, ingested now
    df = stream(spark, root, "exporter", catchUpOrder="newest", maxSegmentsPerTrigger="2",
                acceptanceHorizon="1d")  # fmt: skip
    sink = Collector()
    run_available_now(df, ckpt, sink)
    assert sink.keys() == list(range(40, 70)), "delivered other rows than the recent ones"
    offsets = raw_offsets(ckpt)
    assert all(o["v"] == 4 and o["cutoff_ns"] > real() - DAY_NS - 600 * 10**9
               for o in offsets.values()), offsets  # fmt: skip
    with SubscriberRegistry.open(root) as reg:
        assert all(reg.is_done("exporter", "p-0", s) for s in range(1, 8))
    with QuiverStore.open(root, partition=None) as store:
        row = collect_status(store)["subscribers"][0]
    assert row["horizon_dropped_segments"] == 4
    assert row["horizon_dropped_rows"] == 4 * ROWS_PER_SEGMENT

    again = Collector()  # a restart from the checkpoint: nothing new, nothing again
    run_available_now(stream(spark, root, "exporter", catchUpOrder="newest",
                             acceptanceHorizon="1d"), ckpt, again)  # fmt: skip
    assert again.keys() == []
