"""One SparkSession for every Spark test (cold start costs ~6 s; reuse it).

``local[2,3]``: two cores, and a failed task is retried up to 3 times, as on a
cluster, so task-retry tests (``test_sink.py``) see real retries.

The session's driver runs with ``QUIVER_CONFIG`` naming :func:`spark_profile`, a store
profile that is empty (nothing in force) unless a test writes it: the variable must be
in the driver JVM's environment when it starts (its Python workers inherit it), and
this process never has it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store profile the session's driver reads through ``QUIVER_CONFIG``; empty
    between tests (a test that writes it empties it again)."""
    profile = tmp_path_factory.mktemp("quiver-profile") / "profile.yaml"
    profile.write_text("")
    return profile


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, spark_profile: Path) -> Iterator[object]:
    from quiver_spark.options import QUIVER_CONFIG
    from tests.spark_session import local_session

    scratch = tmp_path_factory.mktemp("spark-local")
    saved = os.environ.get(QUIVER_CONFIG)
    os.environ[QUIVER_CONFIG] = str(spark_profile)  # copied into the JVM's environment
    try:
        session = local_session(scratch, "quiver-tests", master="local[2,3]", driver_memory="2g")
    finally:
        if saved is None:
            del os.environ[QUIVER_CONFIG]
        else:
            os.environ[QUIVER_CONFIG] = saved
    yield session
    session.stop()
