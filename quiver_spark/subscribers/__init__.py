"""Subscribers: registration, ack/nack/dropped outcomes, marks and gap sets.

The public surface is :class:`SubscriberRegistry` with :class:`Outcome` and
:class:`StartPosition`, and :func:`open_registry`, the one way a caller that must
not create anything opens a store's registry. The package's modules:

================  ================================================================
``registry.py``   the shared registry: register, record outcomes, marks (§8)
``journal.py``    the ack log's files: locks, appends, checkpoints (§8.5)
``objects_journal.py`` the ack log on an object root: one object per append (§12.5)
``log.py``        the ack log's bytes (§8.3)
``state.py``      the in-memory state the log replays into (§8.4)
``records.py``    one subscription record per subscriber: life and expiry (§8.10)
``live.py``       one live consumer per subscriber: ``readers/<name>.lock`` (§9b)
================  ================================================================
"""

from __future__ import annotations

import os
from typing import Any

from ..format import SUBSCRIBERS_DIR
from ..objects import ObjectStore
from ..objects.writes import non_posix
from .journal import OpenReport
from .registry import Outcome, StartPosition, SubscriberRegistry, to_runs

__all__ = [
    "OpenReport",
    "Outcome",
    "StartPosition",
    "SubscriberRegistry",
    "has_registry",
    "open_registry",
    "to_runs",
]


def has_registry(root: str) -> bool:
    """True once the store at ``root`` has a ``subscribers/`` directory (§8): before
    any subscriber was registered or any segment recorded deleted, it has none."""
    return os.path.isdir(os.path.join(root, SUBSCRIBERS_DIR))


def open_registry(
    root: str,
    *,
    create: bool = False,
    objects: ObjectStore | None = None,
    **kw: Any,
) -> SubscriberRegistry | None:
    """The subscriber registry of the store at ``root``, or None when it has none and
    ``create`` is false: a read (a batch read, ``quiver status``, a read task that
    classifies a vanished segment) never creates one.

    ``objects`` is the root's object store (None or ``LocalObjects``: the POSIX ack
    log; any other: the object ack log, §12.5, whose open creates nothing and costs
    one GET and one LIST when there is none). ``kw`` goes to
    :meth:`SubscriberRegistry.open` (``io``, ``checkpoint_records``, ``salvage``)."""
    if non_posix(objects):
        reg = SubscriberRegistry.open(root, objects=objects, **kw)
        if create or getattr(reg, "exists", lambda: True)():
            return reg
        reg.close()
        return None
    if not create and not has_registry(root):
        return None
    return SubscriberRegistry.open(root, **kw)
