"""Finalized segments: immutable Arrow IPC files plus checksummed metadata (ARCHITECTURE.md §5).

The store talks to :class:`SegmentLocation`; everything else here is its parts.
"""

from ..errors import SegmentExistsError
from .location import CleanupReport, SegmentLocation
from .meta import SegmentMeta, schema_fingerprint
from .reader import SegmentReader

__all__ = [
    "CleanupReport",
    "SegmentExistsError",
    "SegmentLocation",
    "SegmentMeta",
    "SegmentReader",
    "schema_fingerprint",
]
