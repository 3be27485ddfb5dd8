"""`quiver metrics` and `quiver status` count a subscriber's lag in the same bytes.

README, Operations: bytes count files on disk (a segment is its `.arrow` plus its
`.meta`); `quiver_subscriber_lag_bytes` agrees with the lag `quiver status` shows.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from quiver_spark.subscribers import SubscriberRegistry

from .conftest import run, run_json, write_segments


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_lag_bytes_metric_equals_status_lag_bytes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 3)
    with SubscriberRegistry.open(str(root)) as reg:
        reg.register("idle")  # acknowledged nothing: lags by the whole partition
    status = run_json(["status", root])
    sub = next(s for s in status["subscribers"] if s["name"] == "idle")
    res = run(["metrics", root])
    assert res.exit_code == 0, res.output
    samples = _samples(res.stdout)
    lag = samples[("quiver_subscriber_lag_bytes", (("subscriber", "idle"),))]
    part = samples[("quiver_partition_bytes", (("partition", "p-0"),))]
    assert sub["lag_bytes"] == status["partitions"][0]["segment_bytes"]
    assert lag == sub["lag_bytes"] == part
