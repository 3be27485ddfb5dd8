"""Which :class:`~.backend.SegmentBackend` a segments location's URL opens
(ARCHITECTURE.md §11.2): the one module that knows every implementation a URL names, so
none of them imports it (an object root's own segments are built by its kind)."""

from __future__ import annotations

from collections.abc import Mapping

from ..fs import FileIO
from ..objects import open_objects
from ..objects.options import check_storage_options
from ..option_table import SEGMENT_PATH
from ..urls import LOCAL, OBJECTS, check_url, local_path, segments_client
from .backend import SegmentBackend
from .local import LocalBackend
from .objects import BucketBackend
from .remote import RemoteBackend


def open_backend(
    url: str,
    *,
    io: FileIO,
    storage_options: Mapping[str, object] | None = None,
) -> SegmentBackend:
    """The backend of the segments location ``url`` (accepted by
    :func:`~quiver_spark.urls.check_url`), by its client
    (:func:`~quiver_spark.urls.segments_client`): local for a path or ``file://`` URL,
    through ``io``; an object-store URL (``s3://``, ``gs://``, ``az://``...: obstore;
    ``memory://``: the engine's in-process store) through the store a root there opens,
    with ``storage_options`` checked as a root's (:class:`~.objects.BucketBackend`);
    fsspec for any other URL, with ``storage_options`` as that filesystem's arguments.
    (An object root's own segments are :class:`~.objects.ObjectBackend`, which its kind
    builds.)"""
    client = segments_client(url)
    if client == LOCAL:
        return LocalBackend(local_path(SEGMENT_PATH, url), io)
    if client == OBJECTS:
        return BucketBackend(open_objects(url, storage_options, option=SEGMENT_PATH))
    return RemoteBackend(url, storage_options or {})


def check_location(url: str, storage_options: Mapping[str, object] | None) -> None:
    """Refuse a segments location ``url``, or storage options its client would refuse
    (an object-store URL's: obstore's keys and endpoints, none for ``memory://``, as a
    root's there), before anything is written or contacted:
    :class:`~quiver_spark.errors.ConfigError`."""
    check_url(SEGMENT_PATH, url)
    if segments_client(url) == OBJECTS:
        check_storage_options(url, storage_options)
