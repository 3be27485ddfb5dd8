"""The storage interface under the segment catalog: what a segments location must do
(ARCHITECTURE.md §11.2, §5.4).

:class:`~quiver_spark.segment.catalog.SegmentLocation` decides which files exist and
in which order they appear; a :class:`SegmentBackend` only moves bytes. One module per
implementation:

=================  ==========================================================
``local.py``       :class:`LocalBackend`: a POSIX directory through
                   :class:`~quiver_spark.fs.FileIO` (tmp, fsync, rename, fsync dir)
``remote.py``      :class:`RemoteBackend`: any other fsspec URL (HDFS...);
                   single-request uploads
``objects.py``     :class:`ObjectBackend`: keys in an object root's
                   :class:`~quiver_spark.objects.ObjectStore` (create-if-absent);
                   :class:`BucketBackend`: a ``segment.path`` on an object store
                   (``s3://``, ``gs://``, ``az://``, ``memory://``), through the
                   store a root there opens, files replaced as by a rename
=================  ==========================================================

Paths are plain strings in the backend's own syntax, built from :attr:`root` with
:meth:`SegmentBackend.join` only; no client type (fsspec or other) crosses this
interface, so another client library is one more module, chosen in
:func:`~quiver_spark.segment.backends.open_backend`. This module imports none of them:
each implementation imports it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

T = TypeVar("T")
Consume = Callable[[memoryview], None]
"""Takes the next bytes of a file being written."""
Fill = Callable[[Consume], T]
"""Writes a whole file through the ``Consume`` it is given; returns what it computed."""


@dataclass(frozen=True)
class Level:
    """What one listing shows directly in a directory (:meth:`SegmentBackend.level`)."""

    dirs: list[str]
    files: dict[str, str | None]
    """File name -> its version, when asked for and the storage gives one."""


class SegmentBackend(ABC):
    """The file operations a segments location needs, and what each guarantees.

    A missing file is ``FileNotFoundError`` (or the None/empty result named below);
    any other failure is the ``OSError`` the storage gave, never swallowed.
    """

    root: str
    """The location's root directory, in this backend's path syntax."""
    lists_levels = False
    """Whether :meth:`level` answers (then a location keeps publication hints, §12)."""

    @abstractmethod
    def join(self, *parts: str) -> str:
        """The path of ``parts`` (names, never separators) under :attr:`root`."""

    @abstractmethod
    def display(self, path: str) -> str:
        """``path`` as messages and logs show it (a full URL for a remote location)."""

    # -- listing and probing ------------------------------------------------------
    @abstractmethod
    def entries(self, directory: str, sizes: bool = False) -> dict[str, int]:
        """``{name: bytes}`` of the files in ``directory`` from one listing (sizes 0
        unless ``sizes``; a backend may list subdirectories too, callers tell them by
        name); ``{}`` when the directory does not exist."""

    @abstractmethod
    def subdirs(self, directory: str) -> list[str]:
        """Names of the subdirectories of ``directory``."""

    def level(self, directory: str, versioned: tuple[str, ...] = ()) -> Level | None:
        """What one listing shows directly in ``directory``: its subdirectories and its
        files, each file named in ``versioned`` with what changes whenever it is
        replaced (None for the others). None: this storage cannot tell subdirectories
        from files in one listing (the caller looks at each directory instead)."""
        del directory, versioned
        return None

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists now (never an answer cached before this call)."""

    @abstractmethod
    def has_file(self, path: str) -> bool:
        """Whether the non-empty file ``path`` exists: the cheapest probe the storage has."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """The length of file ``path``, None when it does not exist."""

    # -- reading ------------------------------------------------------------------
    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file ``path``."""

    @abstractmethod
    def read_small(self, path: str) -> bytes:
        """The whole small file ``path`` (a ``.meta``) in as few requests as possible."""

    @abstractmethod
    def read_many(self, paths: list[str]) -> dict[str, bytes | None]:
        """Small files at once, each mapped to its bytes or None when it does not exist."""

    @abstractmethod
    def buffer(self, path: str) -> pa.Buffer:
        """File ``path`` as an Arrow buffer (memory-mapped where the storage allows)."""

    # -- writing ------------------------------------------------------------------
    @abstractmethod
    def makedirs(self, directory: str) -> None:
        """Create ``directory`` and its parents; no error when it exists."""

    @abstractmethod
    def put(
        self, path: str, fill: Fill[T], *, atomic: bool = True, tmp: str = "", replace: bool = False
    ) -> T:
        """Create file ``path`` (mode 0444 where the storage has modes) from what
        ``fill`` writes, durably, and return what ``fill`` returned.

        Readers never see a partial file under ``path``: it is written under ``tmp``
        (default ``path + ".tmp"``) and renamed, or, with ``atomic=False`` where the
        storage makes a single upload visible whole or not at all, uploaded under
        ``path`` directly. On failure nothing new is visible under ``path``.
        A file that exists is replaced where the storage renames over it; on an object
        root (:class:`~quiver_spark.segment.objects.ObjectBackend`) a file is created
        only if absent unless ``replace`` (the quarantine mark, rewritten by design).
        """

    @abstractmethod
    def remove(self, paths: list[str]) -> None:
        """Durably remove the files ``paths``; a missing one is no error. Nothing is
        reported, so nothing is asked first (on an object root: one DELETE each)."""

    def remove_found(self, paths: list[str]) -> list[str]:
        """:meth:`remove`, reporting the files that existed: one existence check
        each before (on an object root a HEAD; only a caller that reads the report,
        the cleanup of a partition's leftovers, pays it)."""
        found = [p for p in paths if self.exists(p)]
        self.remove(paths)
        return found

    @abstractmethod
    def move(self, src: str, dst: str) -> None:
        """Rename file ``src`` to ``dst``, durably in both directories."""
