"""The object interface under the control plane: what a store's root must offer.

A root is a flat namespace of *objects* (keys are relative, ``/``-separated, built
from names that pass the §1 rules) with exactly the primitives S3, GCS and Azure
Blob all have (ARCHITECTURE.md §2):

=================  ============================================================
``get``            the whole object and its *version* (ETag / generation), or None
``head``           the version alone, or None
``create``         write only if absent (S3 ``If-None-Match: *``); else ObjectExists
``replace``        write only if the version is still ``version`` (``If-Match``);
                   else VersionMismatch
``put``            unconditional write (advisory objects only: metrics, notes)
``delete``         remove; a missing object is not an error
``list``           keys under a prefix in key order, optionally starting after a key
``list_dirs``      the names of the directories directly under a prefix (S3
                   ``delimiter=/``): grows with the directories, not their objects
=================  ============================================================

A *version* is an opaque string that changes on every successful write of the key
(never reused for the same key while it exists). Every call is one request to the
storage (a listing: one request a page of :data:`LIST_PAGE` names), so request counts
(:class:`CountingObjects`) are what a bill shows.

Failures (each in :mod:`quiver_spark.errors`): ObjectExists / VersionMismatch when the
precondition did not hold (the write did not happen); ObjectConflict when the storage
refused a conditional write because another one on the same key was in flight (S3's 409:
nothing happened, retry); RequestRejected when the request could not be carried out as
sent (a 4xx, a 501, a client setting: nothing happened, and nothing will on a retry),
a StorageConfigError among them when the root is configured wrong (no credentials,
access denied, no such bucket...: one line naming what to set);
any other failure is an ``OSError`` whose outcome is *unknown* (the write may have
happened and its response been lost). Callers resolve an unknown outcome by reading back
(:func:`create_or_same`), never by assuming. On a cloud root the store itself first
retries a conditional write that failed transiently and reads an unknown outcome back
(:mod:`.retry`), so what reaches a caller is a decided outcome or
:class:`RetriesExhausted` (its budget ran out); ``memory://`` and POSIX roots report
each failure as it happens.

One module per implementation: ``memory.py`` (in-process, shared by name, with
injectable faults, for tests), ``local.py`` (a POSIX directory through
:class:`~quiver_spark.fs.FileIO`), ``cloud.py`` (obstore: ``s3://``, ``gs://``,
``az://``/``abfs://``).
"""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidArgumentError, ObjectExists, RequestRejected, RetriesExhausted

LIST_PAGE = 1000
"""Names one listing request returns at most (S3, GCS and Azure all page by 1,000)."""


def list_pages(names: int) -> int:
    """Requests a listing that returned ``names`` names took (an empty one is one)."""
    return max(1, -(-names // LIST_PAGE))


def check_directory(prefix: str) -> str:
    """``prefix`` if it names a directory (``""`` or ending in ``/``), else ValueError."""
    if prefix and not prefix.endswith("/"):
        raise InvalidArgumentError(
            "directory prefix",
            prefix,
            "'' or a prefix ending with '/'",
            f"directory prefix {prefix!r}: must be '' or end with '/'",
        )
    return prefix


def dirs_of(prefix: str, keys: Iterable[str]) -> list[str]:
    """The directory names directly under ``prefix`` that ``keys`` (full keys) show."""
    out = set()
    for key in keys:
        if key.startswith(prefix):
            head, slash, _ = key[len(prefix) :].partition("/")
            if slash and head:
                out.add(head)
    return sorted(out)


@dataclass(frozen=True)
class Stored:
    """An object's bytes and the version they were read at."""

    data: bytes
    version: str
    modified_ns: int | None = None
    """When the storage says this version was written, by its own clock (a POSIX
    root's mtime, S3's Last-Modified); None: the storage does not say."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    version: str
    modified_ns: int | None = None
    """As :attr:`Stored.modified_ns`."""


@dataclass(frozen=True)
class Level:
    """What one listing with a delimiter shows directly under a prefix."""

    dirs: list[str]
    """The directory names, sorted."""
    objects: list[ObjectInfo]
    """The objects (full keys), in key order."""


class ObjectStore(ABC):
    """A root's objects (see module docstring). Implementations are thread-safe."""

    url: str
    """Where the root is, as messages show it (never with credentials)."""

    @abstractmethod
    def get(self, key: str) -> Stored | None: ...

    @abstractmethod
    def head(self, key: str) -> str | None: ...

    @abstractmethod
    def info(self, key: str) -> ObjectInfo | None:
        """Size and version of ``key`` (one ``HEAD``), None when absent."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> str:
        """Write ``data`` under ``key`` only if absent; the new version."""

    @abstractmethod
    def replace(self, key: str, data: bytes, *, version: str) -> str:
        """Write ``data`` under ``key`` only if its version is ``version``; the new version."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write ``data`` under ``key`` whatever is there; the new version."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order, only keys greater
        than ``after`` when given (one request a page)."""

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """The names of the directories directly under ``prefix`` (``""`` or a prefix
        ending in ``/``; else ValueError), sorted: each ``d`` such that a key starts
        with ``prefix + d + "/"``. Its cost grows with those names, never with the
        objects inside them (one request a page: S3 ``delimiter=/``). This default
        derives them from :meth:`list`; every implementation here overrides it."""
        return dirs_of(check_directory(prefix), (i.key for i in self.list(prefix)))

    def list_level(self, prefix: str) -> Level:
        """The directories directly under ``prefix`` (as :meth:`list_dirs`) and the
        objects directly under it, with their versions, from one listing (S3
        ``delimiter=/`` returns both). This default derives it from :meth:`list`;
        ``memory.py`` and ``cloud.py`` override it."""
        check_directory(prefix)
        found = self.list(prefix)
        return Level(
            dirs_of(prefix, (i.key for i in found)),
            [i for i in found if "/" not in i.key[len(prefix) :]],
        )

    def display(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"

    def put_advisory(self, key: str, data: bytes) -> None:
        """Write an advisory object (metrics, heartbeat) whole, whatever is there: an
        unconditional :meth:`put` here; a POSIX directory's is a temp + rename without
        fsync, so that no acknowledgement or finalize waits on it."""
        self.put(key, data)


def create_or_same(store: ObjectStore, key: str, data: bytes, *, attempts: int = 3) -> bool:
    """Create ``key`` with ``data``; True when it now holds exactly ``data`` (created
    by this call, or by an earlier attempt whose response was lost), False when it
    holds other bytes. An ``OSError`` is retried ``attempts`` times, then raised (at
    once when the store already spent its retry budget on it: :class:`RetriesExhausted`)."""
    for i in range(attempts):
        try:
            store.create(key, data)
            return True
        except ObjectExists:
            got = store.get(key)
            return got is not None and got.data == data
        except OSError as e:
            if i == attempts - 1 or isinstance(e, RetriesExhausted | RequestRejected):
                raise
    raise AssertionError("unreachable")


class CountingObjects(ObjectStore):
    """Wraps a store and counts its requests by kind (``get``, ``create``...); a
    listing counts one ``list`` request a page of :data:`LIST_PAGE` names, as a bill
    does."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _n(self, op: str, n: int = 1) -> None:
        with self._lock:
            self.counts[op] += n

    def total(self) -> int:
        return sum(self.counts.values())

    def get(self, key: str) -> Stored | None:
        self._n("get")
        return self.inner.get(key)

    def head(self, key: str) -> str | None:
        self._n("head")
        return self.inner.head(key)

    def info(self, key: str) -> ObjectInfo | None:
        self._n("head")
        return self.inner.info(key)

    def create(self, key: str, data: bytes) -> str:
        self._n("create")
        return self.inner.create(key, data)

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        self._n("replace")
        return self.inner.replace(key, data, version=version)

    def put(self, key: str, data: bytes) -> str:
        self._n("put")
        return self.inner.put(key, data)

    def put_advisory(self, key: str, data: bytes) -> None:
        self._n("put")
        self.inner.put_advisory(key, data)

    def delete(self, key: str) -> None:
        self._n("delete")
        self.inner.delete(key)

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        try:
            found = self.inner.list(prefix, after=after)
        except BaseException:
            self._n("list")
            raise
        self._n("list", list_pages(len(found)))
        return found

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        try:
            found = self.inner.list_dirs(prefix)
        except BaseException:
            self._n("list")
            raise
        self._n("list", list_pages(len(found)))
        return found

    def list_level(self, prefix: str) -> Level:
        try:
            found = self.inner.list_level(prefix)
        except BaseException:
            self._n("list")
            raise
        self._n("list", list_pages(len(found.dirs) + len(found.objects)))
        return found
