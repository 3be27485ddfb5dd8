"""Which :class:`~.backend.SegmentBackend` a segments location opens (ARCHITECTURE.md
§5.4): the one module that knows every implementation, so none of them imports it."""

from __future__ import annotations

from collections.abc import Mapping

from ..fs import FileIO
from ..objects import ObjectStore
from ..urls import is_local_url, local_path
from .backend import SegmentBackend
from .local import LocalBackend
from .objects import ObjectBackend
from .remote import RemoteBackend


def open_backend(
    url: str,
    *,
    io: FileIO,
    storage_options: Mapping[str, object] | None = None,
    objects: ObjectStore | None = None,
) -> SegmentBackend:
    """The backend of the segments location ``url`` (accepted by
    :func:`~quiver_spark.urls.check_url`): local for a path or ``file://`` URL, through
    ``io``; fsspec for any other URL, with ``storage_options``. With ``objects`` (an
    object root's store), ``url`` is the key prefix of the segments in it
    (``segments``) and the backend is :class:`~.objects.ObjectBackend`."""
    if objects is not None:
        return ObjectBackend(objects, url)
    if is_local_url(url):
        return LocalBackend(local_path("segment.path", url), io)
    return RemoteBackend(url, storage_options or {})
