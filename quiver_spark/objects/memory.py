"""An in-process object store shared by name (``memory://<name>/<prefix>``), with
injectable faults: the reference the other implementations are tested against and
the storage of the engine's race tests (ARCHITECTURE.md §2).

Every operation runs under one global lock, so a precondition and the write it guards
are atomic (moto's are not). :attr:`MemoryObjects.faults` is consulted before and after
each operation; see :class:`Faults`.

The store has a clock of its own (:func:`clock_ns`), by which it stamps every write's
``modified_ns``: the wall clock when this module was loaded advanced by the monotonic
clock, so a change of the process's wall clock (``time.time_ns``) never moves it.
:func:`age_objects` makes every object older, as time passing at the storage would.
"""

from __future__ import annotations

import builtins
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ObjectExists, VersionMismatch
from .base import Level, ObjectInfo, ObjectStore, Stored, check_directory, dirs_of

_LOCK = threading.RLock()
_BUCKETS: dict[str, dict[str, tuple[bytes, str]]] = {}
_VERSIONS = itertools.count(1)
_MODIFIED: dict[str, dict[str, int]] = {}  # bucket -> key -> modified_ns
_WALL0, _MONO0 = time.time_ns(), time.monotonic_ns()


def clock_ns() -> int:
    """The storage's clock: what it stamps a write's ``modified_ns`` with."""
    return _WALL0 + (time.monotonic_ns() - _MONO0)


def age_objects(seconds: float) -> None:
    """Make every object of every bucket written ``seconds`` earlier by the storage's
    clock, as if that long had passed at the storage since (tests)."""
    with _LOCK:
        for times in _MODIFIED.values():
            for key in times:
                times[key] -= int(seconds * 10**9)


@dataclass
class Faults:
    """Hooks a test sets on a store. ``before(op, key)`` runs before an operation
    (raise to fail it: nothing happens); ``after(op, key)`` runs after it succeeded
    (raise to model a success whose response was lost). ``stale_list`` makes ``list``
    answer from the snapshot taken when it was set (a stale listing)."""

    before: Callable[[str, str], None] | None = None
    after: Callable[[str, str], None] | None = None
    stale_list: dict[str, tuple[bytes, str]] | None = field(default=None)


def reset_memory() -> None:
    """Forget every ``memory://`` bucket (tests)."""
    with _LOCK:
        _BUCKETS.clear()
        _MODIFIED.clear()


class MemoryObjects(ObjectStore):
    def __init__(self, bucket: str, prefix: str = "") -> None:
        with _LOCK:
            self._data = _BUCKETS.setdefault(bucket, {})
            self._modified = _MODIFIED.setdefault(bucket, {})
        self.prefix = prefix.strip("/")
        self.url = f"memory://{bucket}/{self.prefix}".rstrip("/")
        self.faults = Faults()

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _before(self, op: str, key: str) -> None:
        if self.faults.before is not None:
            self.faults.before(op, key)

    def _after(self, op: str, key: str) -> None:
        if self.faults.after is not None:
            self.faults.after(op, key)

    def _write(self, key: str, data: bytes) -> str:
        version = f"v{next(_VERSIONS)}"
        self._data[self._k(key)] = (bytes(data), version)
        self._modified[self._k(key)] = clock_ns()
        return version

    def get(self, key: str) -> Stored | None:
        self._before("get", key)
        with _LOCK:
            got = self._data.get(self._k(key))
            when = self._modified.get(self._k(key))
        self._after("get", key)
        return None if got is None else Stored(got[0], got[1], when)

    def head(self, key: str) -> str | None:
        self._before("head", key)
        with _LOCK:
            got = self._data.get(self._k(key))
        self._after("head", key)
        return None if got is None else got[1]

    def info(self, key: str) -> ObjectInfo | None:
        self._before("head", key)
        with _LOCK:
            got = self._data.get(self._k(key))
            when = self._modified.get(self._k(key))
        self._after("head", key)
        return None if got is None else ObjectInfo(key, len(got[0]), got[1], when)

    def create(self, key: str, data: bytes) -> str:
        self._before("create", key)
        with _LOCK:
            if self._k(key) in self._data:
                raise ObjectExists(self.display(key), "already exists")
            version = self._write(key, data)
        self._after("create", key)
        return version

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        self._before("replace", key)
        with _LOCK:
            got = self._data.get(self._k(key))
            if got is None or got[1] != version:
                raise VersionMismatch(self.display(key), f"is not at version {version}")
            new = self._write(key, data)
        self._after("replace", key)
        return new

    def put(self, key: str, data: bytes) -> str:
        self._before("put", key)
        with _LOCK:
            version = self._write(key, data)
        self._after("put", key)
        return version

    def delete(self, key: str) -> None:
        self._before("delete", key)
        with _LOCK:
            self._data.pop(self._k(key), None)
            self._modified.pop(self._k(key), None)
        self._after("delete", key)

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        self._before("list", prefix)
        with _LOCK:
            source = self.faults.stale_list if self.faults.stale_list is not None else self._data
            full = self._k(prefix)
            start = self._k(after) if after is not None else None
            cut = len(self.prefix) + 1 if self.prefix else 0
            out = [
                ObjectInfo(k[cut:], len(v[0]), v[1], self._modified.get(k))
                for k, v in sorted(source.items())
                if k.startswith(full) and (start is None or k > start)
            ]
        self._after("list", prefix)
        return out

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """A listing with ``delimiter=/`` (its faults are those of ``list``)."""
        check_directory(prefix)
        self._before("list", prefix)
        with _LOCK:
            source = self.faults.stale_list if self.faults.stale_list is not None else self._data
            full = self._k(prefix)
            out = dirs_of(full, source)
        self._after("list", prefix)
        return out

    def list_level(self, prefix: str) -> Level:
        """A listing with ``delimiter=/``: directories and objects (faults of ``list``)."""
        check_directory(prefix)
        self._before("list", prefix)
        with _LOCK:
            source = self.faults.stale_list if self.faults.stale_list is not None else self._data
            full = self._k(prefix)
            cut = len(self.prefix) + 1 if self.prefix else 0
            out = Level(
                dirs_of(full, source),
                [
                    ObjectInfo(k[cut:], len(v[0]), v[1], self._modified.get(k))
                    for k, v in sorted(source.items())
                    if k.startswith(full) and "/" not in k[len(full) :]
                ],
            )
        self._after("list", prefix)
        return out

    def snapshot(self) -> dict[str, tuple[bytes, str]]:
        """A copy of every object of the bucket (for ``faults.stale_list``)."""
        with _LOCK:
            return dict(self._data)
