"""One SparkSession for every Spark test (cold start costs ~6 s; reuse it).

``local[2,3]``: two cores, and a failed task is retried up to 3 times, as on a
cluster, so task-retry tests (``test_sink.py``) see real retries.
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
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tests.spark_session import local_session

    scratch = tmp_path_factory.mktemp("spark-local")
    session = local_session(scratch, "quiver-tests", master="local[2,3]", driver_memory="2g")
    yield session
    session.stop()
