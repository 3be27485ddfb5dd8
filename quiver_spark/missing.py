"""The earlier import path of the missing-segment classification, now in
:mod:`quiver_spark.dataloss` (kept so code that imports it from here goes on working)."""

from __future__ import annotations

from .dataloss import (
    MissingSegment,
    PartitionEvidence,
    SegmentFacts,
    evidence,
)
from .errors import MissingKind

DELETED = MissingKind.DELETED
QUARANTINED = MissingKind.QUARANTINED
MISSING = MissingKind.MISSING
CORRUPT = MissingKind.CORRUPT

__all__ = [
    "CORRUPT",
    "DELETED",
    "MISSING",
    "QUARANTINED",
    "MissingSegment",
    "PartitionEvidence",
    "SegmentFacts",
    "evidence",
]
