"""Metrics files a textfile collector can scrape: no series twice, HELP and TYPE on
every family, counters that survive a restart, stale writer files recognised."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from quiver_spark import QuiverStore
from quiver_spark.cli import cli
from quiver_spark.options import store_config_from_options
from quiver_spark.subscription import Subscription

OPTS = {"segment.max_open_duration": "60s", "retention.size_cap": "1GB"}


def run_pipeline(root: Path) -> None:
    cfg = store_config_from_options(OPTS)
    with QuiverStore.open(str(root), cfg, partition=None, background=False) as h:
        h.subscribers.register("fast")
        h.subscribers.register("slow")
    for pid in ("p-0", "p-1"):
        with QuiverStore.open(str(root), cfg, partition=pid, background=False) as s:
            for i in range(3):
                s.append(pa.record_batch({"k": pa.array([i], type=pa.int64())}))
                s.finalize()
    for name in ("fast", "slow"):
        with Subscription.open(str(root), name) as sub:
            batch = sub.poll()
            assert batch is not None
            sub.ack(batch.end if name == "fast" else batch.start.merged({"p-0": 1}))
    res = CliRunner().invoke(cli, ["gc", str(root)])
    assert res.exit_code == 0, res.output


def series(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [
        (s.name, tuple(sorted(s.labels.items())))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def test_no_series_appears_twice_across_the_files_of_a_collector_dir(tmp_path: Path) -> None:
    run_pipeline(tmp_path)
    files = sorted(os.listdir(tmp_path / "metrics"))
    assert files == [
        "consumer-fast.prom", "consumer-slow.prom", "gc.prom", "writer-p-0.prom",
        "writer-p-1.prom",
    ]  # fmt: skip
    res = CliRunner().invoke(cli, ["metrics", str(tmp_path)])
    assert res.exit_code == 0, res.output
    texts = [res.output] + [(tmp_path / "metrics" / f).read_text() for f in files]
    seen = [s for t in texts for s in series(t)]
    assert len(seen) == len(set(seen)), "a series appears in two files"
    for text in texts:
        for fam in text_string_to_metric_families(text):
            assert fam.documentation, f"{fam.name} has no HELP"
            assert fam.type in ("counter", "gauge")
    store_wide = {name: dict(labels) for name, labels in series(res.output)}
    assert "quiver_subscriber_lag_segments" in store_wide and "quiver_store_bytes" in store_wide
    lag = {
        dict(labels)["subscriber"]: v.value
        for fam in text_string_to_metric_families(res.output)
        for v in fam.samples
        if v.name == "quiver_subscriber_lag_segments"
        for labels in [tuple(v.labels.items())]
    }
    assert lag == {"fast": 0.0, "slow": 5.0}
    # the consumers' and gc's counters are exported, each with its instance label
    acked = [
        s for s in series((tmp_path / "metrics" / "consumer-fast.prom").read_text())
        if s[0] == "quiver_source_acked_segments_total"
    ]  # fmt: skip
    assert acked and dict(acked[0][1])["instance"] == "consumer-fast"
    merged = CliRunner().invoke(cli, ["metrics", str(tmp_path), "--all"]).output
    families = [f.name for f in text_string_to_metric_families(merged)]
    assert len(families) == len(set(families))  # one HELP/TYPE per family when merged


def test_counters_continue_across_a_restart(tmp_path: Path) -> None:
    run_pipeline(tmp_path)
    path = tmp_path / "metrics" / "consumer-fast.prom"

    def acked() -> float:
        return sum(
            s.value
            for fam in text_string_to_metric_families(path.read_text())
            for s in fam.samples
            if s.name == "quiver_source_acked_segments_total"
        )

    before = acked()
    assert before == 6
    cfg = store_config_from_options(OPTS)
    with QuiverStore.open(str(tmp_path), cfg, partition="p-0", background=False) as s:
        s.append(pa.record_batch({"k": pa.array([9], type=pa.int64())}))
        s.finalize()
    with Subscription.open(str(tmp_path), "fast") as sub:  # a new process would do the same
        batch = sub.poll()
        assert batch is not None
        sub.ack(batch.end)
    assert acked() == before + 1


def test_stale_writer_files_are_recognised_and_pruned(tmp_path: Path) -> None:
    run_pipeline(tmp_path)
    cfg = store_config_from_options(OPTS)
    with QuiverStore.open(str(tmp_path), cfg, partition="p-0", background=False) as live:
        live.run_retention()
        res = CliRunner().invoke(cli, ["metrics", str(tmp_path), "--prune-stale"])
        assert res.exit_code == 0, res.output
        left = sorted(os.listdir(tmp_path / "metrics"))
        assert "writer-p-0.prom" in left and "writer-p-1.prom" not in left
        up = {
            s.labels["partition"]: s.value
            for fam in text_string_to_metric_families(res.stdout)
            for s in fam.samples
            if s.name == "quiver_partition_writer_live"
        }
        assert up == {"p-0": 1.0, "p-1": 0.0}
