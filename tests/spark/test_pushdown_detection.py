"""Batch-read pruning rests on telling PySpark's filter-pushdown worker by the module
its process runs.

PySpark 4.3 calls a batch reader's ``pushFilters`` only in its filter-pushdown worker,
which Spark runs only when ``spark.sql.python.filterPushdown.enabled`` is true, and
refuses a reader implementing ``pushFilters`` when the setting is false. Nothing tells
``DataSource.reader()`` the setting, so the reader that prunes is given only inside that
worker (``quiver_spark.spark.datasource.in_filter_pushdown_worker``) and every other
process gets one without ``pushFilters``. These tests fail, naming the PySpark version,
when the installed PySpark no longer pushes filters in the worker recognised, or when
the reader given elsewhere would be refused: an upgrade of PySpark that moved the call
would otherwise silently turn segment pruning off.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import json
from pathlib import Path

import pyspark
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType

from quiver_spark.spark import datasource as qds

from .source_helpers import TS_BASE_US, remove_segment_data, write_segments

UPGRADE_HINT = (
    f"quiver_spark.spark.datasource.in_filter_pushdown_worker does not recognise how "
    f"PySpark {pyspark.__version__} pushes filters to a Python data source: update it "
    f"(and the PySpark pin), or batch reads stop pruning segments"
)


def test_the_installed_pyspark_pushes_filters_in_the_worker_recognised() -> None:
    assert importlib.util.find_spec(qds.FILTER_PUSHDOWN_WORKER) is not None, UPGRADE_HINT
    from pyspark.sql.worker import data_source_pushdown_filters as worker

    assert worker.__name__ == qds.FILTER_PUSHDOWN_WORKER, UPGRADE_HINT
    assert ".pushFilters(" in inspect.getsource(worker._main), UPGRADE_HINT


def test_outside_that_worker_the_reader_has_no_push_filters(tmp_path: Path) -> None:
    """What Spark's read-planning worker gets (with pushdown on or off): a reader its
    check takes for one that does not implement ``pushFilters``."""
    assert qds.in_filter_pushdown_worker() is False  # this process runs pytest
    root = str(tmp_path / "store")
    write_segments(root, 1)
    schema = qds.QuiverDataSource({"path": root}).schema()
    assert isinstance(schema, StructType)
    reader = qds.QuiverDataSource({"path": root}).reader(schema)
    assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters


def test_with_pushdown_enabled_a_pushed_filter_prunes_segments(spark, tmp_path) -> None:
    """End to end in a session with pushdown on: segments the filter excludes are never
    opened (their data files are gone; opening one would fail the read)."""
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    root = str(tmp_path / "store")
    write_segments(root, 5)  # key k has ts = base + k hours; segment i holds keys 10i..10i+9
    remove_segment_data(root, [1, 2])
    cut = dt.datetime.fromtimestamp(TS_BASE_US / 1e6 + 25 * 3600, dt.UTC)
    df = spark.read.format("quiver").load(root).where(F.col("ts") >= F.lit(cut)).select("k")
    try:
        keys = sorted(r.k for r in df.collect())
    except Exception as e:  # a read that opened a pruned segment
        raise AssertionError(f"{UPGRADE_HINT}\n{e}") from e
    assert keys == list(range(25, 50)), json.dumps(keys)
