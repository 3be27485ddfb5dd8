"""The root of the hierarchy, :class:`QuiverError`, in a module of its own so that
every module of the errors package can derive from it without importing the package
(which imports them)."""

from __future__ import annotations


class QuiverError(Exception):
    """Raised for any failure inside quiver_spark (the root of the hierarchy)."""

    retryable: bool = False
