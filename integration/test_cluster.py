"""G6 on a real cluster: a pipeline through Quiver survives executor and driver kill -9.

``jobs/pipeline.py`` is submitted with ``spark-submit`` from the fresh venv (the
built wheel, no checkout) to a standalone cluster of one master and two workers on
127.0.0.1. One driver runs three queries: a producer writing keys ``0 .. total-1``
into the ``quiver`` sink, and two subscribers (``fast``: every second, many
segments per trigger; ``slow``: every 2 s, few segments per trigger) writing what
they receive to Parquet. The test kills an executor JVM (kill -9), later the
driver (kill -9 of the JVM and its Python children), restarts the driver from its
checkpoints, and at the end audits every key of both subscribers and what the
store reclaimed. ``make test`` runs the short scenario; ``make soak`` the long one
(random kills every few minutes, ``QUIVER_SOAK_MINUTES``, default 20).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from integration.audit import delivered_rows
from integration.harness import FreshVenv, StandaloneCluster
from integration.scenario import (
    Pipeline,
    assert_exactly_once,
    assert_executors_use_the_wheel,
    assert_loopback_only,
)

# -- scenarios -----------------------------------------------------------------------


@pytest.mark.timeout(1200)
def test_pipeline_survives_executor_and_driver_kill_9_with_exactly_once_delivery(
    spark_cluster: StandaloneCluster, fresh_venv: FreshVenv, tmp_path: Path
) -> None:
    rng = random.Random(6)
    run = Pipeline(
        fresh_venv,
        spark_cluster.master_url,
        spark_cluster,
        tmp_path / "pipeline",
        total=6000,
        rows_per_batch=300,
    )
    try:
        run.start_driver()
        run.wait_until(run.progressed("fast", 0), "first rows at the fast subscriber", 300)
        assert_executors_use_the_wheel(run)
        assert_loopback_only(spark_cluster)
        run.kill_executor(rng)
        seen = delivered_rows(run.out("fast"))
        run.wait_until(run.progressed("fast", seen), "delivery after the executor kill", 180)
        seen = delivered_rows(run.out("slow"))
        run.wait_until(run.progressed("slow", seen), "slow subscriber progress", 120)
        run.kill_driver()
        run.start_driver()
        run.finish(360)
    finally:
        run.driver.stop()
    assert_exactly_once(run)


def _soak_minutes() -> float:
    return float(os.environ.get("QUIVER_SOAK_MINUTES", "20"))


@pytest.mark.soak
@pytest.mark.timeout(int(_soak_minutes() * 60 + 1800))
def test_soak_pipeline_survives_random_executor_and_driver_kills(
    spark_cluster: StandaloneCluster, fresh_venv: FreshVenv, tmp_path: Path
) -> None:
    """Kills every ~minutes/8 (an executor first, then the driver, then at random)."""
    minutes = _soak_minutes()
    rng = random.Random(int(os.environ.get("QUIVER_SOAK_SEED", "66")))
    rows_per_batch = 1000
    run = Pipeline(
        fresh_venv, spark_cluster.master_url, spark_cluster, tmp_path / "soak",
        total=int(minutes * 60 / 2) * rows_per_batch, rows_per_batch=rows_per_batch,
        producer_trigger_s=2.0,
    )  # fmt: skip
    mean_pause = max(30.0, minutes * 60 / 8)
    deadline = time.monotonic() + minutes * 60
    try:
        run.start_driver()
        run.wait_until(run.progressed("fast", 0), "first rows at the fast subscriber", 300)
        assert_executors_use_the_wheel(run)
        while time.monotonic() < deadline and not run.complete():
            end = min(deadline, time.monotonic() + rng.uniform(0.5, 1.5) * mean_pause)
            while time.monotonic() < end and not run.complete():
                run.check_alive()
                time.sleep(2)
            if time.monotonic() >= deadline or run.complete():
                break
            kind = ["executor", "driver"][len(run.kills)] if len(run.kills) < 2 else (
                "executor" if rng.random() < 0.7 else "driver")  # fmt: skip
            if kind == "executor":
                run.kill_executor(rng)
            else:
                run.kill_driver()
                run.start_driver()
            print(f"[soak] {run.elapsed()} delivered {run.rows()} of {run.total}")
        run.finish(minutes * 60 + 600)
    finally:
        run.driver.stop()
    assert_exactly_once(run)
    kinds = {k.split("@")[0] for k in run.kills}
    assert kinds == {"executor", "driver"}, f"the soak must kill both kinds: {run.kills}"
