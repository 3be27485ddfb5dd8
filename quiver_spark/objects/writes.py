"""Two ways of writing the control objects that every root shares (ARCHITECTURE.md §12.2).

- :func:`retry_conflicts`: run a conditional write again while the storage answers
  :class:`~quiver_spark.errors.ObjectConflict` (nothing was written); every other
  outcome is the caller's to judge.
- :func:`put_advisory`: an advisory object (metrics, heartbeat): on a POSIX root the
  temp + rename of the node_exporter textfile convention, without fsync, so that no
  acknowledgement or finalize waits on it; elsewhere an unconditional ``put``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from ..errors import ObjectConflict
from .base import ObjectStore
from .local import LocalObjects

T = TypeVar("T")

CONFLICT_ATTEMPTS = 8
"""How many times a write the storage refused with a 409 is tried before it is raised."""


def retry_conflicts(write: Callable[[], T], *, attempts: int = CONFLICT_ATTEMPTS) -> T:
    """``write()``, tried again while it raises :class:`ObjectConflict` (the storage
    wrote nothing); the last conflict is raised after ``attempts`` tries."""
    for i in range(attempts):
        try:
            return write()
        except ObjectConflict:
            if i == attempts - 1:
                raise
    raise AssertionError("unreachable")


def local_of(objects: ObjectStore) -> LocalObjects | None:
    """The POSIX directory under ``objects`` (through a counting wrapper), if it is one."""
    inner = getattr(objects, "inner", None)
    if isinstance(inner, ObjectStore):
        return local_of(inner)
    return objects if isinstance(objects, LocalObjects) else None


def non_posix(objects: ObjectStore | None) -> bool:
    """True when ``objects`` (a root's store) is an object store rather than a POSIX
    directory: its claims are leases and its ack log is objects (§12.3, §12.5). None, or
    a :class:`~.local.LocalObjects` under any counting wrapper, is POSIX."""
    return objects is not None and local_of(objects) is None


def put_advisory(objects: ObjectStore, key: str, data: bytes) -> None:
    """Write an advisory object whole, whatever is there (see module docstring)."""
    local = local_of(objects)
    if local is None:
        retry_conflicts(lambda: objects.put(key, data))
        return
    path = local.path(key)
    local.io.mkdir(os.path.dirname(path))
    local.io.write_advisory(path, data)
