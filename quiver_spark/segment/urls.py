"""Location strings of a segments location and a store root, as
:mod:`quiver_spark.urls` (which owns every scheme) defines them."""

from __future__ import annotations

from ..urls import (
    COMMON_SCHEMES,
    EXTRAS,
    LOCAL_SCHEMES,
    OBJECT_ROOT_SCHEMES,
    check_url,
    is_local_url,
    is_object_root,
    local_path,
    root_location,
)

__all__ = [
    "COMMON_SCHEMES",
    "EXTRAS",
    "LOCAL_SCHEMES",
    "OBJECT_ROOT_SCHEMES",
    "check_url",
    "is_local_url",
    "is_object_root",
    "local_path",
    "root_location",
]
