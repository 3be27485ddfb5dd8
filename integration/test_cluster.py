"""G6 on a real cluster: a pipeline through Quiver survives executor and driver kill -9.

``jobs/pipeline.py`` is submitted with ``spark-submit`` (the fresh venv's Spark
installation; the package as the built wheel, no checkout) to a standalone cluster
of one master and two workers on 127.0.0.1. One driver runs three queries: a producer writing keys ``0 .. total-1``
into the ``quiver`` sink, and two subscribers (``fast``: every second, many
segments per trigger; ``slow``: every 2 s, few segments per trigger) writing what
they receive to Parquet. The test kills an executor JVM (kill -9), later the
driver (kill -9 of the JVM and its Python children), restarts the driver from its
checkpoints, and at the end audits every key of both subscribers and what the
store reclaimed. ``make test`` runs the short scenario; ``make soak`` the long one
(random kills every few minutes, ``QUIVER_SOAK_MINUTES``, default 20).

The package reaches the cluster as docs/cluster.md says: a packed environment
(``python -m venv --copies`` + the wheel, tarred) shipped with ``spark-submit
--archives quiver_env.tar.gz#environment``, ``PYSPARK_PYTHON`` and
``PYSPARK_DRIVER_PYTHON`` both ``./environment/bin/python``, the driver run from a
directory holding the same archive unpacked. The workers run with no Python
environment at all (``BareStandaloneCluster``); the test checks that the driver, the
executors' probe and every PySpark worker process on the executors run the archive's
Python and import ``quiver_spark`` and ``pyarrow`` from it.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.audit import delivered_rows
from integration.harness import (
    ENV_ALIAS,
    ArchiveSparkSubmit,
    BareStandaloneCluster,
    FreshVenv,
    StandaloneCluster,
    build_packed_env,
    python_executables,
)
from integration.scenario import Pipeline, assert_exactly_once, assert_loopback_only

# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def packed_env(integration_root: Path, quiver_wheel: Path) -> Path:
    """``quiver_env.tar.gz``, built once per session under the session's directory."""
    t0 = time.monotonic()
    archive = build_packed_env(integration_root / "packed-env", quiver_wheel)
    size = archive.stat().st_size / 2**20
    print(
        f"[integration] packed env {archive.name} ({size:.0f} MiB) in {time.monotonic() - t0:.1f}s"
    )
    return archive


@pytest.fixture(scope="session")
def bare_cluster(
    java: str, fresh_venv: FreshVenv, integration_root: Path
) -> Iterator[StandaloneCluster]:
    """A loopback standalone cluster whose daemons have no Python environment."""
    del java
    t0 = time.monotonic()
    cluster = BareStandaloneCluster(fresh_venv, integration_root / "cluster")
    try:
        cluster.start()
        print(f"[integration] cluster {cluster.master_url} up in {time.monotonic() - t0:.1f}s")
        yield cluster
    finally:
        survivors = cluster.stop()
        assert not survivors, f"processes survived the cluster teardown: {survivors}"


def archive_pipeline(
    fresh_venv: FreshVenv, cluster: StandaloneCluster, archive: Path, root: Path, **kw: Any
) -> Pipeline:
    """A :class:`Pipeline` whose driver is submitted as docs/cluster.md says."""
    run = Pipeline(fresh_venv, cluster.master_url, cluster, root, **kw)
    run.driver = ArchiveSparkSubmit.replacing(run.driver, archive)
    env, cmd = run.driver.command()
    print("[cluster] " + " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(cmd))
    return run


def assert_everything_runs_from_the_archive(run: Pipeline, cluster: StandaloneCluster) -> None:
    """Driver and executors import quiver_spark and pyarrow from the unpacked archive,
    and every PySpark worker on the executors runs its Python (data source tasks too:
    PySpark starts them with ``PYSPARK_DRIVER_PYTHON``, see docs/cluster.md)."""
    events = run.read_events()
    venv = str(run.venv.root)
    start = [e for e in events if e["event"] == "start"][-1]
    driver_env = str(run.root / ENV_ALIAS)
    for f in (start["python"], start["quiver_spark"], start["pyspark_quiver"], start["pyarrow"]):
        assert f.startswith(driver_env), f"driver not on the unpacked archive: {start}"
    assert not any(p.startswith(venv) for p in start["sys_path"] if "pyspark" not in p), start
    probe = [e for e in events if e["event"] == "probe"][-1]
    work = str(cluster.work_dir)
    for _host, _pid, python, *files in probe["executors"]:
        env_dir = python.rsplit("/bin/", 1)[0]
        assert python.startswith(work) and env_dir.endswith(f"/{ENV_ALIAS}"), probe
        assert all(f.startswith(env_dir) for f in files), f"imported outside the archive: {probe}"
    workers = python_executables(cluster.work_dir)
    assert workers, "no PySpark worker process on the executors"
    assert workers == {f"./{ENV_ALIAS}/bin/python"}, f"executor Python workers run {workers}"
    print(
        f"[cluster] executors run {sorted(workers)}; quiver_spark from {probe['executors'][0][3]}"
    )


# -- scenarios -----------------------------------------------------------------------


@pytest.mark.timeout(1200)
def test_pipeline_survives_executor_and_driver_kill_9_with_exactly_once_delivery(
    bare_cluster: StandaloneCluster, fresh_venv: FreshVenv, packed_env: Path, tmp_path: Path
) -> None:
    rng = random.Random(6)
    run = archive_pipeline(
        fresh_venv, bare_cluster, packed_env, tmp_path / "pipeline", total=6000, rows_per_batch=300
    )
    try:
        run.start_driver()
        run.wait_until(run.progressed("fast", 0), "first rows at the fast subscriber", 300)
        assert_everything_runs_from_the_archive(run, bare_cluster)
        assert_loopback_only(bare_cluster)
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
    bare_cluster: StandaloneCluster, fresh_venv: FreshVenv, packed_env: Path, tmp_path: Path
) -> None:
    """Kills every ~minutes/8 (an executor first, then the driver, then at random)."""
    minutes = _soak_minutes()
    rng = random.Random(int(os.environ.get("QUIVER_SOAK_SEED", "66")))
    rows_per_batch = 1000
    run = archive_pipeline(
        fresh_venv, bare_cluster, packed_env, tmp_path / "soak",
        total=int(minutes * 60 / 2) * rows_per_batch, rows_per_batch=rows_per_batch,
        producer_trigger_s=2.0,
    )  # fmt: skip
    mean_pause = max(30.0, minutes * 60 / 8)
    deadline = time.monotonic() + minutes * 60
    try:
        run.start_driver()
        run.wait_until(run.progressed("fast", 0), "first rows at the fast subscriber", 300)
        assert_everything_runs_from_the_archive(run, bare_cluster)
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
