"""Object roots by URL, in one import: which locations are object stores
(:mod:`quiver_spark.urls`), the storage options their clients take (:mod:`.options`)
and how to open one (:mod:`.roots`)."""

from __future__ import annotations

from ..urls import FAMILIES, is_object_url, object_scheme
from .options import (
    CLIENT_KEYS,
    CONFIG_KEYS,
    QUIVER_KEYS,
    StorageOptions,
    check_storage_options,
    is_secret_key,
    redact,
)
from .roots import open_objects

__all__ = [
    "CLIENT_KEYS",
    "CONFIG_KEYS",
    "FAMILIES",
    "QUIVER_KEYS",
    "StorageOptions",
    "check_storage_options",
    "is_object_url",
    "is_secret_key",
    "object_scheme",
    "open_objects",
    "redact",
]
