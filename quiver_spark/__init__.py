"""quiver_spark: Quiver, a durable embeddable Arrow segment buffer, for Spark.

The engine (:class:`QuiverStore`) never imports pyspark; ``register`` and
``QuiverDataSource`` load the Spark layer lazily.
"""

from __future__ import annotations

from typing import Any

from .config import RetentionConfig, SegmentConfig, SizeCapPolicy, StoreConfig, WalConfig
from .errors import (
    ChecksumMismatchError,
    ConfigError,
    CorruptionError,
    LockedError,
    QuiverError,
    SchemaMismatchError,
    StoreAtCapacityError,
    StoreNotFoundError,
    SubscriberError,
    UnknownSegmentError,
    WalFailedError,
)

__version__ = "0.1.0"

__all__ = [
    "ChecksumMismatchError",
    "ConfigError",
    "CorruptionError",
    "LockedError",
    "QuiverDataSource",
    "QuiverError",
    "QuiverStore",
    "RetentionConfig",
    "SchemaMismatchError",
    "SegmentConfig",
    "SizeCapPolicy",
    "StoreAtCapacityError",
    "StoreConfig",
    "StoreNotFoundError",
    "SubscriberError",
    "UnknownSegmentError",
    "WalConfig",
    "WalFailedError",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``quiver`` data source with ``spark`` explicitly.

    Not needed after ``pip install quiver-spark``: PySpark finds the top-level
    ``pyspark_quiver`` module on its own. Needed with ``spark-submit --py-files
    quiver_spark-*.whl``, which PySpark's lookup does not list: the call also ships
    the package to the session's Python workers, whose nodes must have its
    dependencies installed (else ImportError, in one line, names ``--archives``).
    """
    from .spark.shipping import ship_to_workers

    ship_to_workers(spark)
    from .spark.datasource import QuiverDataSource

    spark.dataSource.register(QuiverDataSource)


def __getattr__(name: str) -> Any:
    if name == "QuiverStore":  # on first use: `quiver` starts without importing pyarrow
        from .store import QuiverStore

        return QuiverStore
    if name == "QuiverDataSource":
        from .spark.datasource import QuiverDataSource

        return QuiverDataSource
    raise AttributeError(name)
