"""A damaged advisory metrics file never fails an operation that does not need it.

``<root>/metrics/*.prom`` only carries counters across a restart: a process that
cannot read its file back logs it and starts its counters from zero, a consumer's
acknowledgements go on, and ``quiver metrics --all`` names the file and skips it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.metrics import SOURCE_ACKED, Metrics, read_exposition
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.damage import flip_bit
from tests.stores import HAND_SEALED


def fill(root: Path, n: int) -> None:
    with QuiverStore.open(str(root), HAND_SEALED, partition="p-0", background=False) as s:
        for i in range(n):
            s.append(pa.record_batch({"k": pa.array([i], pa.int64())}))
            s.finalize()


def consume(root: Path, name: str = "c") -> int:
    """One poll and ack by a consumer; the segments it acknowledged."""
    with Subscription.open(str(root), name) as sub:
        batch = sub.poll()
        return 0 if batch is None else sub.ack(batch.end)


def high_bit(path: Path) -> None:
    """The top bit of a byte in the middle of a text file: no longer UTF-8."""
    flip_bit(path, os.path.getsize(path) // 2, 7)


def test_restoring_counters_from_a_damaged_file_logs_and_starts_from_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = Metrics()
    m.inc(SOURCE_ACKED, 5, subscriber="c")
    path = tmp_path / "consumer-c.prom"
    path.write_text(m.to_prometheus(instance="consumer-c"))
    high_bit(path)
    fresh = Metrics()
    with caplog.at_level(logging.WARNING, logger="quiver_spark.metrics"):
        assert fresh.restore_counters(str(path)) == 0
    assert fresh.total(SOURCE_ACKED) == 0
    assert str(path) in caplog.text and "quiver.metrics.unreadable" in caplog.text
    with pytest.raises(ValueError, match="not UTF-8"):
        read_exposition(str(path))


def test_a_restarted_consumer_acknowledges_over_its_damaged_metrics_file(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    assert consume(tmp_path) == 2
    prom = tmp_path / "metrics" / "consumer-c.prom"
    high_bit(prom)
    fill(tmp_path, 1)
    # a new process, as a restarted query's driver would be
    out = subprocess.run(
        [sys.executable, "-c", f"from tests.engine.test_damaged_metrics import consume; "
         f"from pathlib import Path; print(consume(Path({str(tmp_path)!r})))"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
    assert "quiver.metrics.unreadable" in out.stderr and str(prom) in out.stderr
    read_exposition(str(prom))  # rewritten whole by the consumer
    with Subscription.open(str(tmp_path), "c") as sub:
        assert sub.acked() == Position({"p-0": 3})


def test_quiver_metrics_all_names_a_damaged_file_and_prints_the_rest(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    consume(tmp_path)
    prom = tmp_path / "metrics" / "consumer-c.prom"
    high_bit(prom)
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "metrics", str(tmp_path), "--all"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith(f"warning: metrics file {prom} is damaged (not UTF-8")
    assert first.endswith("skipped")
    assert "quiver_store_bytes" in out.stdout and "Traceback" not in out.stderr
