"""Batch-read pruning depends on recognising PySpark's planning workers from the stack.

PySpark 4.3 gives ``DataSource.reader()`` no supported way to know whether
``spark.sql.python.filterPushdown.enabled`` is set (see
``quiver_spark.spark.datasource._filter_pushdown_enabled``), so the reader tells
Spark's filter-pushdown worker from its read-planning worker by their frames. These
tests run both workers of the installed PySpark in this process, fed the bytes the
JVM would send, and fail naming the PySpark version when the detection no longer
recognises either: an upgrade of PySpark that moved the call paths would otherwise
silently turn segment pruning off.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct

import pyspark
import pytest
from pyspark.serializers import CloudPickleSerializer
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import BinaryType, StructField, StructType

from quiver_spark.spark import datasource as qds

from .source_helpers import TS_BASE_US, remove_segment_data, write_segments

SCHEMA = StructType([StructField("k", BinaryType())])
UPGRADE_HINT = (
    f"quiver_spark.spark.datasource._filter_pushdown_enabled does not recognise how "
    f"PySpark {pyspark.__version__} plans a Python data source read: update it (and "
    f"the PySpark pin), or batch reads stop pruning segments"
)


class Detected(Exception):
    """Raised by the probe's ``reader()`` to stop the worker once it has looked."""

    def __init__(self, value: bool | None) -> None:
        super().__init__(value)
        self.value = value


class ProbeDataSource(DataSource):
    """Reports what the detection sees from inside Spark's planning worker."""

    @classmethod
    def name(cls) -> str:
        return "quiver_pushdown_probe"

    def reader(self, schema: StructType) -> DataSourceReader:
        import inspect

        frame = inspect.currentframe()
        try:
            raise Detected(qds.pushdown_signal(frame.f_back if frame else None))
        finally:
            del frame


def _frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


def _utf8(text: str) -> bytes:
    return _frame(text.encode())


def _data_source() -> bytes:
    return _frame(CloudPickleSerializer().dumps(ProbeDataSource(options={})))


def _run_worker(main: object, stream: bytes) -> bool | None:
    with pytest.raises(Detected) as seen:
        main(io.BytesIO(stream), io.BytesIO())  # type: ignore[operator]
    return seen.value.value


def test_detection_recognises_the_filter_pushdown_worker() -> None:
    """Spark runs this worker only when filter pushdown is enabled."""
    from pyspark.sql.worker import data_source_pushdown_filters as worker

    stream = _data_source() + _utf8(SCHEMA.json())
    assert _run_worker(worker._main, stream) is True, UPGRADE_HINT


@pytest.mark.parametrize("enabled", [False, True])
def test_detection_reads_the_flag_of_the_read_planning_worker(enabled: bool) -> None:
    from pyspark.sql.worker import plan_data_source_read as worker

    stream = (
        _data_source()
        + _utf8(SCHEMA.json())  # the input schema: one binary column
        + _utf8(SCHEMA.json())  # the output schema
        + struct.pack("!i", 10_000)  # spark.sql.execution.arrow.maxRecordsPerBatch
        + struct.pack("!?", enabled)  # spark.sql.python.filterPushdown.enabled
        + struct.pack("!?", False)  # streaming
        + struct.pack("!?", False)  # binary as bytes
    )
    assert _run_worker(worker._main, stream) is enabled, UPGRADE_HINT


def test_outside_spark_planning_nothing_is_recognised() -> None:
    assert qds._filter_pushdown_enabled() is False


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
