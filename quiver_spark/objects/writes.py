"""Two ways of writing the control objects that every root shares (ARCHITECTURE.md §2.3).

- :func:`retry_conflicts`: run a conditional write again while the storage answers
  :class:`~quiver_spark.errors.ObjectConflict` (nothing was written); every other
  outcome is the caller's to judge.
- :func:`put_advisory`: an advisory object (metrics, heartbeat): on a POSIX root the
  temp + rename of the node_exporter textfile convention, without fsync, so that no
  acknowledgement or finalize waits on it; elsewhere an unconditional ``put``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import ObjectConflict
from .base import ObjectStore

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


def put_advisory(objects: ObjectStore, key: str, data: bytes) -> None:
    """Write an advisory object whole, whatever is there (see module docstring): the
    root's own :meth:`~.base.ObjectStore.put_advisory`, tried again on a conflict."""
    retry_conflicts(lambda: objects.put_advisory(key, data))
