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
        from .source import QuiverBatchReader

        return QuiverBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import QuiverStreamReader

        return QuiverStreamReader(self.options, schema)
