"""``QuiverDataSource``: the ``quiver`` format for Spark reads, writes and streams.

Options are documented in README.md ("Options"); they are parsed in
:mod:`quiver_spark.spark.options` and nowhere else.

>>> (df.writeStream.format("quiver")                                # doctest: +SKIP
...     .option("checkpointLocation", "/ckpt/ingest")
...     .option("segment.target_size", "32MB")
...     .start("/data/quiver"))
>>> (spark.readStream.format("quiver")                              # doctest: +SKIP
...     .option("subscriber", "parquet_exporter")
...     .load("/data/quiver"))
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..errors import QuiverError
from ..subscription import check_reader_root
from . import source
from .options import source_root
from .user_errors import guarded, one_line

log = logging.getLogger(__name__)

_READER_METHODS = ("pushFilters", "partitions", "read")
_STREAM_METHODS = (
    "initialOffset",
    "latestOffset",
    "reportLatestOffset",
    "prepareForTriggerAvailableNow",
    "partitions",
    "read",
    "commit",
)

# The readers Spark gets: the source's classes with every method Spark calls reporting
# a QuiverError as one line (user_errors.py). Module-level, so pickling finds them.
QuiverBatchReader = guarded(source.QuiverBatchReader, _READER_METHODS, __name__)
QuiverStreamReader = guarded(source.QuiverStreamReader, _STREAM_METHODS, __name__)


class QuiverDataSource(DataSource):
    """Spark data source named ``quiver`` (sink, source, batch read and write)."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    @one_line
    def schema(self) -> StructType | str:
        from .source_read import store_spark_schema

        check_reader_root(source_root(self.options))
        return store_spark_schema(self.options)

    @one_line
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import QuiverBatchWriter

        return QuiverBatchWriter(self.options, schema, overwrite)

    @one_line
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import QuiverStreamWriter

        return QuiverStreamWriter(self.options, schema, overwrite)

    @one_line
    def reader(self, schema: StructType) -> DataSourceReader:
        check_reader_root(source_root(self.options))
        if _filter_pushdown_enabled():
            return QuiverBatchReader(self.options, schema)
        return QuiverBatchReaderNoPushdown(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # PySpark 4.3's stream runner calls ``reader.stop()`` in a ``finally`` around the
        # construction, so an error raised here reaches the user as an UnboundLocalError
        # about ``reader``: a refused reader is returned instead and raises at Spark's
        # first call, where the runner reports it as it is.
        try:
            return QuiverStreamReader(self.options, schema)
        except QuiverError as e:
            return RefusedStreamReader(e)


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of a query whose options or store were refused: every method
    Spark calls raises that refusal (as one line); ``stop`` does nothing."""

    def __init__(self, error: QuiverError) -> None:
        self.error = error

    @one_line
    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    @one_line
    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    @one_line
    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        raise self.error

    @one_line
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    @one_line
    def commit(self, end: dict[str, Any]) -> None:
        raise self.error

    @one_line
    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error

    def stop(self) -> None:
        pass


class QuiverBatchReaderNoPushdown(QuiverBatchReader):  # type: ignore[misc,valid-type]
    """The batch reader without segment pruning, for sessions with pushdown disabled."""

    pushFilters = DataSourceReader.pushFilters


PUSHDOWN_WORKER = "data_source_pushdown_filters.py"
"""File name of PySpark's filter-pushdown planning worker
(``pyspark/sql/worker/data_source_pushdown_filters.py``)."""
PLAN_READ_FLAG = "enable_pushdown"
"""Local of PySpark's read-planning worker (``pyspark/sql/worker/plan_data_source_read.py``)
holding ``spark.sql.python.filterPushdown.enabled``."""
SPARK_WORKER_DIR = ("pyspark", "sql", "worker")

_warned_unrecognised = False


def _filter_pushdown_enabled() -> bool:
    """Whether Spark enabled Python filter pushdown for the read being planned.

    PySpark 4.3 offers no supported way to know: ``DataSource.reader()`` gets only
    the schema, the session configuration does not reach the planning worker, and
    ``plan_data_source_read`` refuses a reader that implements ``pushFilters``
    unless ``spark.sql.python.filterPushdown.enabled`` is true. With pushdown on,
    Spark builds the reader in its filter-pushdown worker; with it off, in the
    read-planning worker, which holds the flag in a local (``enable_pushdown``) but
    does not pass it to ``reader()``. We tell the two apart from the caller's
    frames (:func:`pushdown_signal`). When neither is recognised the read goes on
    without pruning, so a plain ``spark.read.format("quiver").load(path)`` works in
    every session, and a warning names the PySpark version: a PySpark that moved
    these call paths turns pruning off, never correctness.
    ``tests/spark/test_pushdown_detection.py`` drives both workers of the installed
    PySpark and fails when either is no longer recognised.
    """
    import inspect

    frame = inspect.currentframe()
    try:
        found = pushdown_signal(frame.f_back if frame is not None else None)
    finally:
        del frame
    if found is None:
        _warn_unrecognised()
        return False
    return found


def pushdown_signal(frame: FrameType | None, depth: int = 8) -> bool | None:
    """What the ``depth`` frames from ``frame`` outwards say about filter pushdown.

    ``True`` inside PySpark's filter-pushdown worker, the ``enable_pushdown`` flag
    inside its read-planning worker, ``None`` when neither is found (an unknown
    PySpark, or a call from outside Spark's planning).
    """
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code.co_filename.endswith(PUSHDOWN_WORKER):
            return True  # Spark's filter-pushdown worker: only used when enabled
        flag = frame.f_locals.get(PLAN_READ_FLAG)
        if isinstance(flag, bool):
            return flag
        frame = frame.f_back
    return None


def _warn_unrecognised() -> None:
    global _warned_unrecognised
    if _warned_unrecognised:
        return
    _warned_unrecognised = True
    import pyspark

    log.warning(
        "quiver: cannot tell whether spark.sql.python.filterPushdown.enabled is set "
        "(PySpark %s planned this read through a call path quiver does not know); "
        "batch reads will not prune segments by filter",
        pyspark.__version__,
    )
