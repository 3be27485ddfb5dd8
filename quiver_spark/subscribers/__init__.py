"""Subscribers: registration, ack/nack/dropped outcomes, marks and gap sets.

The public surface is :class:`SubscriberRegistry` with :class:`Outcome` and
:class:`StartPosition`, and :func:`open_registry`, the one way a caller that must
not create anything opens a store's registry. The package's modules:

================  ================================================================
``registry.py``   the shared registry: register, record outcomes, marks (§13)
``journal.py``    what the registry needs of an ack log (``Journal``); its files on a
                  POSIX root: locks, appends, checkpoints (§13.5)
``objects_journal.py`` the ack log on an object root: one object per append (§13.7)
``log.py``        the ack log's bytes (§13.3)
``state.py``      the in-memory state the log replays into (§13.4)
``records.py``    one subscription record per subscriber: life and expiry (§13.8)
``live.py``       one live consumer per subscriber: ``readers/<name>.lock`` (§18)
================  ================================================================
"""

from __future__ import annotations

from typing import Any

from ..objects import ObjectStore
from .journal import OpenReport, has_registry
from .registry import JournalKind, Outcome, StartPosition, SubscriberRegistry, to_runs

__all__ = [
    "JournalKind",
    "OpenReport",
    "Outcome",
    "StartPosition",
    "SubscriberRegistry",
    "has_registry",
    "open_registry",
    "to_runs",
]


def open_registry(
    root: str,
    *,
    journal: JournalKind,
    create: bool = False,
    objects: ObjectStore | None = None,
    **kw: Any,
) -> SubscriberRegistry | None:
    """The subscriber registry of the store at ``root``, or None when it has none and
    ``create`` is false: a read (a batch read, ``quiver status``, a read task that
    classifies a vanished segment) never creates one.

    ``journal`` is the ack log the root's kind names
    (:attr:`~quiver_spark.root_kind.RootKind.journal`), ``objects`` the root's object
    store (the object ack log's open, §13.7, creates nothing and costs one GET and one
    LIST when there is none). ``kw`` goes to :meth:`SubscriberRegistry.open` (``io``,
    ``checkpoint_records``, ``salvage``)."""
    if create:
        return SubscriberRegistry.open(root, objects=objects, journal=journal, **kw)
    found = journal.open_existing(root, objects=objects, **kw)
    return None if found is None else SubscriberRegistry(found)
