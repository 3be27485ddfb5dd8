"""Which journal a root's ack log is kept in: the one place the subscribers package
asks what kind of root it is on."""

from __future__ import annotations

from ..objects import ObjectStore
from ..objects.writes import non_posix
from .journal import FileJournal
from .objects_journal import ObjectJournal


def journal_kind(objects: ObjectStore | None) -> type[FileJournal] | type[ObjectJournal]:
    """The journal for the root whose object store is ``objects``: None or a (wrapped)
    :class:`~quiver_spark.objects.local.LocalObjects` keeps the POSIX ack log under
    ``<root>/subscribers/`` (§8); any other store the object ack log
    (``subscribers/CHECKPOINT`` + ``subscribers/log/``, §12.5), which creates nothing
    until the first append."""
    return ObjectJournal if non_posix(objects) else FileJournal
