"""The object store of a store root, by its URL (ARCHITECTURE.md §2).

=====================  ==============================================================
local path, file://    :class:`~quiver_spark.objects.local.LocalObjects`
``memory://name/pre``  :class:`~quiver_spark.objects.memory.MemoryObjects` (in-process)
``s3://`` ``s3a://``   :class:`~quiver_spark.objects.cloud.CloudObjects` (obstore)
``gs://`` ``gcs://``
``az://`` ``abfs://``
``abfss://``
=====================  ==============================================================

Which scheme is which is :mod:`quiver_spark.urls`'s; the options a cloud root takes are
:mod:`.options`'. The implementations are imported only for the roots that need them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ..fs import DEFAULT_IO, FileIO
from ..urls import local_path, object_scheme
from .base import ObjectStore
from .options import check_storage_options


def open_objects(
    url_or_path: str,
    storage_options: Mapping[str, object] | None = None,
    io: FileIO = DEFAULT_IO,
    *,
    option: str = "path",
) -> ObjectStore:
    """The :class:`ObjectStore` of a root: a local path or ``file://`` URL (through
    ``io``; storage options are not used there), ``memory://name/prefix``, or a cloud URL
    opened by obstore with ``storage_options``. ``option``: the option that named it, as
    messages name it (``segment.path`` for a segments location on an object store,
    opened here with the store's storage options as its root would be)."""
    raw = str(url_or_path).strip()
    scheme = object_scheme(raw)
    if scheme is None:
        from .local import LocalObjects

        return LocalObjects(local_path(option, raw), io)
    opts = check_storage_options(raw, storage_options)
    rest = raw.split("://", 1)[1]
    if scheme == "memory":
        from .memory import MemoryObjects

        bucket, _, prefix = rest.strip("/").partition("/")
        if not bucket:
            raise ConfigError(option, raw, "a memory URL naming a store: memory://name/prefix")
        return MemoryObjects(bucket, prefix)
    if not rest.strip("/"):
        raise ConfigError(option, raw, f"a URL with a location after {scheme}://")
    from .cloud import CloudObjects

    return CloudObjects(raw, opts, option=option)
