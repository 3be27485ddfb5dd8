"""Run the product as a user would: built wheel, fresh virtualenv, spark-submit, a cluster.

Session fixtures, built once and shared by every test in ``integration/``:

``quiver_wheel``
    ``pip wheel --no-deps`` of the checkout into a temporary directory.
``fresh_venv``
    A new virtualenv (``venv --without-pip``; the outer pip installs into it with
    ``--python``) with the wheel installed by pip, its dependencies resolved.
    PySpark's pip package is ~450 MB and costs ~16 s to copy, so the heavy
    dependencies (pyspark, pyarrow, obstore) come from a venv built once per machine by
    pip from the same specs (``~/.cache/quiver-spark/integration``, or
    ``$QUIVER_INTEGRATION_CACHE``) and are hard-linked into each fresh venv (~1 s).
    ``QUIVER_INTEGRATION_NO_CACHE=1`` installs everything with pip instead.
    The checkout is never on its path: its commands run from a scratch directory,
    and a check at creation fails if ``quiver_spark`` resolves anywhere else.
``_reap_everything``
    After the session, kills by pid every process still running from this session's
    directory (executors, Python workers, drivers), whether the tests passed or not.
    The standalone cluster itself is started by ``integration/test_cluster.py``
    (workers with no Python environment, the package shipped with ``--archives``).

A missing prerequisite (Java) fails with a message; nothing here is skipped.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness import (
    FreshVenv,
    build_fresh_venv,
    build_wheel,
    kill_pids,
    processes_under,
    wait_gone,
)


@pytest.fixture(scope="session")
def integration_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quiver-integration")


@pytest.fixture(scope="session")
def java() -> str:
    exe = shutil.which("java")
    if exe is None:
        pytest.fail(
            "integration tests need Java 17 on PATH (apt-get install openjdk-17-jre-headless)"
        )
    return exe


@pytest.fixture(scope="session")
def quiver_wheel(integration_root: Path) -> Path:
    t0 = time.monotonic()
    out = integration_root / "wheel"
    out.mkdir()
    wheel = build_wheel(out)
    print(f"\n[integration] wheel {wheel.name} built in {time.monotonic() - t0:.1f}s")
    return wheel


@pytest.fixture(scope="session")
def fresh_venv(integration_root: Path, quiver_wheel: Path) -> FreshVenv:
    t0 = time.monotonic()
    venv, how = build_fresh_venv(integration_root, quiver_wheel)
    print(f"[integration] fresh venv ({how}) + wheel installed in {time.monotonic() - t0:.1f}s")
    return venv


@pytest.fixture(scope="session", autouse=True)
def _reap_everything(integration_root: Path) -> Iterator[None]:
    """Last line of defence: nothing started from the session directory outlives it."""
    yield
    leftovers = processes_under(integration_root)
    kill_pids(leftovers)
    assert not wait_gone(leftovers, 20), f"could not kill {leftovers}"
