"""Auto-registration hook: PySpark registers ``pyspark_<name>.DefaultSource``."""

from quiver_spark.spark.datasource import QuiverDataSource as DefaultSource

__all__ = ["DefaultSource"]
