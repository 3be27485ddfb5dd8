"""Objects: the primitives a store's root offers the control plane (ARCHITECTURE.md §2).

:func:`open_objects` maps a root to its implementation; the modules are imported only
for the roots that need them.
"""

from __future__ import annotations

from .base import (
    CountingObjects,
    Level,
    ObjectInfo,
    ObjectStore,
    Stored,
    create_or_same,
)
from .options import StorageOptions, redact
from .roots import open_objects

__all__ = [
    "CountingObjects",
    "Level",
    "ObjectInfo",
    "ObjectStore",
    "StorageOptions",
    "Stored",
    "create_or_same",
    "open_objects",
    "redact",
]
