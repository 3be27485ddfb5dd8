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
    ``pyspark_quiver`` module on its own.
    """
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
