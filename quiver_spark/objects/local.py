"""Objects in a local POSIX directory, through :class:`~quiver_spark.fs.FileIO`
(ARCHITECTURE.md §2.2): the POSIX root's implementation of :class:`ObjectStore`.

- ``create``: the bytes go to a temporary file, fsynced, hard-linked to the key's path
  (``link`` fails if it exists), directory fsynced: whole or absent, never replaced.
- ``replace``: under ``flock`` of the directory's ``.objects.lock``, the key's current
  version is compared, then the file is replaced durably (temp, fsync, rename, fsync
  directory). Every writer of a key takes the same lock, so compare and write are atomic.
- version: ``<inode>-<mtime_ns>-<size>`` in hex; a replace always makes a new inode.
- modified time: the file's mtime (the file system's clock, the same for every process
  writing the root; ``modified_ns`` of :class:`Stored` and :class:`ObjectInfo`).
- ``create``: also under that lock, so the version it returns is of its own bytes.
- ``put``/``delete``: durable replace / unlink + directory fsync, under the same lock
  (a delete never lands between a replace's compare and its rename).
- ``get``: version from ``fstat`` of the file it reads (keys are replaced by a new
  inode, never rewritten in place).
"""

from __future__ import annotations

import builtins
import os

from .. import layout
from ..errors import ObjectExists, VersionMismatch
from ..fs import DEFAULT_IO, FileIO, file_lock
from .base import ObjectInfo, ObjectStore, Stored, check_directory

LOCK_NAME = layout.objects_lock()


def _version(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


class LocalObjects(ObjectStore):
    def __init__(self, root: str, io: FileIO = DEFAULT_IO) -> None:
        self.root = os.path.abspath(root)
        self.url = self.root
        self.io = io

    def path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def display(self, key: str) -> str:
        return self.path(key)

    def _stat(self, path: str) -> os.stat_result | None:
        self.io.before("stat", path)
        try:
            return os.stat(path)
        except FileNotFoundError:
            return None

    def _dir(self, key: str) -> str:
        d = os.path.dirname(self.path(key))
        self.io.mkdir(d)
        return d

    def get(self, key: str) -> Stored | None:
        """The bytes and the version of the one file opened: a key is only ever
        replaced by a new inode, never rewritten in place, so the two always agree."""
        path = self.path(key)
        self.io.before("read", path)
        self.io.before("read", path)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            st = os.fstat(fd)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        return Stored(data, _version(st), st.st_mtime_ns)

    def head(self, key: str) -> str | None:
        st = self._stat(self.path(key))
        return None if st is None else _version(st)

    def info(self, key: str) -> ObjectInfo | None:
        st = self._stat(self.path(key))
        return None if st is None else ObjectInfo(key, st.st_size, _version(st), st.st_mtime_ns)

    def create(self, key: str, data: bytes) -> str:
        self._dir(key)
        path = self.path(key)
        st = self.io.create_exclusive_stat(path, data)  # the version is of our inode
        if st is None:
            raise ObjectExists(path, "already exists")
        return _version(st)

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        d = self._dir(key)
        path = self.path(key)
        with file_lock(os.path.join(d, LOCK_NAME)):
            st = self._stat(path)
            if st is None or _version(st) != version:
                raise VersionMismatch(path, f"is not at version {version}")
            self.io.atomic_write(path, data)
            new = self._stat(path)
        assert new is not None
        return _version(new)

    def put(self, key: str, data: bytes) -> str:
        d = self._dir(key)
        path = self.path(key)
        with file_lock(os.path.join(d, LOCK_NAME)):
            self.io.atomic_write(path, data)
            st = self._stat(path)
        assert st is not None
        return _version(st)

    def put_advisory(self, key: str, data: bytes) -> None:
        path = self.path(key)
        self.io.mkdir(os.path.dirname(path))
        self.io.write_advisory(path, data)

    def delete(self, key: str) -> None:
        path = self.path(key)
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            return
        with file_lock(os.path.join(d, LOCK_NAME)):  # never between a replace's check and write
            self.io.durable_unlink([path])

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self.path(base) if base else self.root
        out: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name == LOCK_NAME or layout.is_tmp(name):
                    continue
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                if not key.startswith(prefix) or (after is not None and key <= after):
                    continue
                st = self._stat(os.path.join(dirpath, name))
                if st is not None:
                    out.append(ObjectInfo(key, st.st_size, _version(st), st.st_mtime_ns))
        out.sort(key=lambda i: i.key)
        return out

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """The subdirectories of ``prefix``'s directory (one ``scandir``); a directory
        whose objects were all deleted may still be named."""
        check_directory(prefix)
        top = self.path(prefix.rstrip("/")) if prefix else self.root
        self.io.before("listdir", top)
        try:
            with os.scandir(top) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []
