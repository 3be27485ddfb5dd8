"""A query that ran with ``acceptanceHorizon`` and is restarted from its checkpoint
without it (ARCHITECTURE.md §19.1: the option only decides future plans) plans no
batch while nothing new is published: its next plan is the last offset, cutoff and
all, so Spark, which compares offsets by their JSON, adds no empty batch to its log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .source_helpers import Collector, run_available_now, stream, write_segments
from .test_a_query_with_an_acceptance_horizon_drops_old_segments_once import DAY_NS, raw_offsets


def test_a_restart_without_the_horizon_adds_no_batch_while_nothing_is_new(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    real = time.time_ns
    with monkeypatch.context() as m:  # ingested two days ago: past a 1d horizon
        m.setattr(time, "time_ns", lambda: real() - 2 * DAY_NS)
        write_segments(root, 2)
    write_segments(root, 2, first_key=20)
    first = Collector()
    run_available_now(stream(spark, root, "e", acceptanceHorizon="1d"), ckpt, first)
    assert first.keys() == list(range(20, 40))
    before = raw_offsets(ckpt)
    assert [o["v"] for o in before.values()] == [4]
    again = Collector()
    run_available_now(stream(spark, root, "e"), ckpt, again)
    assert again.keys() == []
    assert raw_offsets(ckpt) == before, "the restart planned an empty batch"
