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

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .source import QuiverBatchReader


class QuiverDataSource(DataSource):
    """Spark data source named ``quiver`` (sink, source, batch read and write)."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> StructType | str:
        from .source import store_spark_schema

        return store_spark_schema(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import QuiverBatchWriter

        return QuiverBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import QuiverStreamWriter

        return QuiverStreamWriter(self.options, schema, overwrite)

    def reader(self, schema: StructType) -> DataSourceReader:
        if _filter_pushdown_enabled():
            return QuiverBatchReader(self.options, schema)
        return QuiverBatchReaderNoPushdown(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import QuiverStreamReader

        return QuiverStreamReader(self.options, schema)


class QuiverBatchReaderNoPushdown(QuiverBatchReader):
    """The batch reader without segment pruning, for sessions with pushdown disabled."""

    pushFilters = DataSourceReader.pushFilters


def _filter_pushdown_enabled() -> bool:
    """Whether Spark enabled Python filter pushdown for the read being planned.

    PySpark 4.3 refuses a reader that implements ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is true. With pushdown on, it builds
    the reader in its filter-pushdown worker; with it off, in the read-planning
    worker, which holds the flag in a local (``enable_pushdown``) but does not pass it
    to ``reader()``. We tell the two apart from the caller's frames; when neither is
    found the read goes on without pruning, so a plain
    ``spark.read.format("quiver").load(path)`` works in every session.
    """
    import inspect

    frame = inspect.currentframe()
    try:
        for _ in range(8):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return False
            if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
                return True  # Spark's filter-pushdown worker: only used when enabled
            flag = frame.f_locals.get("enable_pushdown")
            if isinstance(flag, bool):
                return flag
        return False
    finally:
        del frame
