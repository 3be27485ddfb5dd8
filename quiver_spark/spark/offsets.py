"""Source offsets: the Spark name of an engine :class:`~quiver_spark.position.Position`.

The JSON format is specified in :mod:`quiver_spark.position` and ARCHITECTURE.md §9a.
"""

from __future__ import annotations

from ..position import OFFSET_VERSION, Position

QuiverOffset = Position

__all__ = ["OFFSET_VERSION", "QuiverOffset"]
