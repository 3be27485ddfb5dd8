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

import sys
from collections.abc import Iterator, Sequence
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
from ..subscription.opening import check_reader_root
from . import source
from .options import source_root, spark_options
from .user_errors import guarded, one_line, worker_logging

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

        options = spark_options(self.options)  # folded once for the whole call
        check_reader_root(source_root(options))
        return store_spark_schema(options)

    @one_line
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import QuiverBatchWriter

        return QuiverBatchWriter(spark_options(self.options), schema, overwrite)

    @one_line
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import QuiverStreamWriter

        return QuiverStreamWriter(spark_options(self.options), schema, overwrite)

    @one_line
    def reader(self, schema: StructType) -> DataSourceReader:
        options = spark_options(self.options)
        check_reader_root(source_root(options))
        if in_filter_pushdown_worker():
            return QuiverBatchReader(options, schema)
        return QuiverBatchReaderNoPushdown(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # PySpark 4.3's stream runner calls ``reader.stop()`` in a ``finally`` around the
        # construction, so an error raised here reaches the user as an UnboundLocalError
        # about ``reader``: a refused reader is returned instead and raises at Spark's
        # first call, where the runner reports it as it is.
        worker_logging()  # not one_line: the stream runner's first Quiver call
        try:
            return QuiverStreamReader(spark_options(self.options), schema)
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
    """The batch reader without segment pruning: the one Spark gets wherever it does not
    call ``pushFilters``."""

    pushFilters = DataSourceReader.pushFilters


FILTER_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
"""PySpark's filter-pushdown planning worker, the module a process runs to push filters."""


def in_filter_pushdown_worker() -> bool:
    """Whether this process is PySpark's filter-pushdown worker, the one process that
    calls a batch reader's ``pushFilters``.

    Which reader Spark may get follows from two documented rules of PySpark 4.3: it
    calls ``pushFilters`` only when ``spark.sql.python.filterPushdown.enabled`` is
    true, and with the setting false it refuses a reader that implements
    ``pushFilters``. Neither the options, the session nor the planning process tells
    ``DataSource.reader()`` the setting, and none has to: the reader that can prune is
    given only to the process that pushes filters (which Spark starts only with the
    setting on), and every other process (read planning, with the setting on or off)
    gets the reader without ``pushFilters``, which it never calls there. That process
    is told by the module it runs, named on its command line: the argument of
    PySpark's worker daemon (``python -m pyspark.daemon <worker module>``) or the
    module run as ``__main__`` (``python -m <worker module>``, without the daemon). A
    PySpark that renamed the worker turns pruning off, never correctness;
    ``tests/spark/test_pushdown_detection.py`` fails when the installed PySpark's worker
    is no longer recognised.
    """
    main = sys.modules.get("__main__")
    running = getattr(getattr(main, "__spec__", None), "name", None)
    return FILTER_PUSHDOWN_WORKER in (running, *sys.argv[1:2])
