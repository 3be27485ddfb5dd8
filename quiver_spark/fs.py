"""The only module that touches the operating system's file API.

Every open, write, fsync, rename, unlink and directory fsync of WAL, metadata, lock
and ack files goes through a :class:`FileIO`. Tests substitute a subclass that
records a trace or raises ``EIO``/``ENOSPC``/``EACCES`` at the k-th operation (see
``tests/faults.py``). Finalized segments elsewhere go through obstore (an object
store) or fsspec (any other URL) in :mod:`quiver_spark.segment` instead.

Durability rules (ARCHITECTURE.md, "Durability"): a new or renamed file is durable
only after the file is fsynced, renamed, and its directory fsynced; old state is
removed only after the new state is durable.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time

from . import layout
from .errors import LockedError

_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class FileIO:
    """Primitive file operations plus the composite durable ones built on them.

    Subclasses override :meth:`before` to observe or fail operations. ``op`` is one of
    ``open read write fsync close rename link unlink mkdir fsync_dir truncate chmod
    listdir stat``.
    """

    def __init__(self) -> None:
        self._fd_paths: dict[int, str] = {}

    # -- hook -------------------------------------------------------------------
    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        """Called before every primitive operation; the default does nothing."""

    def path_of(self, fd: int) -> str:
        return self._fd_paths.get(fd, f"<fd {fd}>")

    # -- primitives ---------------------------------------------------------------
    def open_create(self, path: str) -> int:
        """Create or truncate ``path`` for writing."""
        self.before("open", path)
        fd = os.open(path, _CREATE, 0o644)
        self._fd_paths[fd] = path
        return fd

    def open_append(self, path: str) -> int:
        self.before("open", path)
        fd = os.open(path, _APPEND, 0o644)
        self._fd_paths[fd] = path
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> None:
        """Write all of ``data``; a short write is continued, an error raised."""
        self.before("write", self.path_of(fd), bytes(data) if self.wants_data else None, len(data))
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def writev(self, fd: int, buffers: list[bytes | memoryview]) -> None:
        """Write all ``buffers`` back to back with ``writev(2)``, without joining them.

        One ``write`` operation for :meth:`before` (with the joined bytes only when
        ``wants_data``); a short write is continued, an error raised.
        """
        views = [memoryview(b).cast("B") for b in buffers]
        total = sum(len(v) for v in views)
        self.before("write", self.path_of(fd), b"".join(views) if self.wants_data else None, total)
        while views:
            n = os.writev(fd, views)
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if n:
                views[0] = views[0][n:]

    wants_data = False
    """Subclasses that record written bytes set this so :meth:`before` receives them."""

    def fsync(self, fd: int) -> None:
        self.before("fsync", self.path_of(fd))
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self.before("fsync", self.path_of(fd))
        os.fdatasync(fd)

    def close(self, fd: int) -> None:
        self._fd_paths.pop(fd, None)
        os.close(fd)

    def read_file(self, path: str) -> bytes:
        self.before("read", path)
        with open(path, "rb") as f:
            return f.read()

    def rename(self, src: str, dst: str) -> None:
        self.before("rename", dst)
        os.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        """Give the file ``src`` the new name ``dst``; FileExistsError if ``dst`` exists.

        ``link(2)`` never replaces an existing name, which makes it an exclusive create
        of a file whose content is already complete (see :meth:`create_exclusive`).
        """
        self.before("link", dst)
        os.link(src, dst)

    def unlink(self, path: str) -> None:
        self.before("unlink", path)
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        """Create ``path`` and missing parents, fsyncing each parent that changed."""
        if os.path.isdir(path):
            return
        parent = os.path.dirname(os.path.abspath(path))
        self.mkdir(parent)
        self.before("mkdir", path)
        try:
            os.mkdir(path)
        except FileExistsError:
            return
        self.fsync_dir(parent)

    def fsync_dir(self, path: str) -> None:
        self.before("fsync_dir", path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        self.before("truncate", path, size=size)
        os.truncate(path, size)

    def chmod(self, path: str, mode: int) -> None:
        self.before("chmod", path)
        os.chmod(path, mode)

    # -- reads that cannot change state -------------------------------------------
    def listdir(self, path: str) -> list[str]:
        """Sorted names in ``path``; a missing directory has none."""
        self.before("listdir", path)
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def scandir(self, path: str) -> list[tuple[str, bool]]:
        """Sorted ``(name, is_dir)`` of the entries of ``path`` from one listing (the
        file system reports the types: no stat per entry); a missing directory has none."""
        self.before("listdir", path)
        try:
            with os.scandir(path) as it:
                return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stat_token(self, path: str) -> str | None:
        """What changes whenever file ``path`` is replaced (inode, mtime, size), None
        when it does not exist: one stat."""
        self.before("stat", path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"

    def exists(self, path: str) -> bool:
        self.before("stat", path)
        return os.path.exists(path)

    def size(self, path: str) -> int:
        self.before("stat", path)
        return os.stat(path).st_size

    # -- composites ---------------------------------------------------------------
    def _write_synced(self, path: str, data: bytes) -> None:
        """Create ``path`` holding ``data``, fsynced (its name is not durable yet)."""
        fd = self.open_create(path)
        try:
            self.write(fd, data)
            self.fsync(fd)
        finally:
            self.close(fd)

    def atomic_write(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` durably: temp, fsync, rename, fsync dir."""
        tmp = layout.tmp(path)
        self._write_synced(tmp, data)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` durably unless it exists; True if created.

        The bytes go to a temporary file of this call alone, which is fsynced and then
        hard-linked to ``path``: the name appears whole or not at all, and never
        replaces an existing file (two racing creators: exactly one gets True). The
        temporary name is removed and the directory fsynced on both outcomes, so a
        ``False`` also means the existing file's name is durable.
        """
        return self.create_exclusive_stat(path, data) is not None

    def create_exclusive_stat(self, path: str, data: bytes) -> os.stat_result | None:
        """:meth:`create_exclusive`, returning the created file's ``stat`` (taken of
        the temporary file before the link: the same inode, whatever replaces ``path``
        afterwards) or None when ``path`` existed."""
        d = os.path.dirname(path) or "."
        tmp = layout.unique_tmp(
            path, f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
        )
        self._write_synced(tmp, data)
        try:
            self.before("stat", tmp)
            st: os.stat_result | None = os.stat(tmp)
            self.link(tmp, path)
        except FileExistsError:
            st = None
        finally:
            try:
                self.unlink(tmp)
            except FileNotFoundError:
                pass
        self.fsync_dir(d)
        return st

    def write_advisory(self, path: str, data: bytes) -> None:
        """Replace ``path`` atomically but without fsync: for advisory files only.

        Used for the writer heartbeat and metrics expositions, which readers treat as
        hints; they are not part of any durability argument. Each step goes through
        :meth:`before` like every other write, so a caller sees the same errors.
        """
        tmp = layout.tmp(path)
        fd = self.open_create(tmp)
        try:
            self.write(fd, data)
        finally:
            self.close(fd)
        self.rename(tmp, path)

    def durable_unlink(self, paths: list[str]) -> None:
        """Remove ``paths`` (missing ones ignored) and fsync each directory touched."""
        dirs: set[str] = set()
        for p in paths:
            try:
                self.unlink(p)
            except FileNotFoundError:
                continue
            dirs.add(os.path.dirname(p) or ".")
        for d in sorted(dirs):
            self.fsync_dir(d)


DEFAULT_IO = FileIO()


# -- single-writer lock ------------------------------------------------------------

_registry_lock = threading.Lock()
_registry: dict[str, str] = {}


class PartitionLock:
    """Exclusive ``flock`` on a LOCK file, held for the writer's lifetime.

    ``flock`` (not POSIX ``fcntl`` locks, which vanish when any descriptor to the file
    closes) is released by the kernel when the holder dies, so a killed writer's lock
    is free again. A per-process registry rejects a second writer in the same
    process with a message naming this process.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: str, purpose: str = "writer") -> PartitionLock:
        key = os.path.realpath(path)
        with _registry_lock:
            if key in _registry:
                raise LockedError(path, f"this process (pid {os.getpid()}, {_registry[key]})")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _read_holder(fd)
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise LockedError(path, holder) from e
                raise
            info = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "purpose": purpose,
            }
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(info).encode(), 0)
            except BaseException:  # a claim that failed holds nothing (a full disk frees up)
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                raise
            _registry[key] = purpose
            return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        with _registry_lock:
            _registry.pop(os.path.realpath(self.path), None)
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode() or "{}")
        if not isinstance(info, dict) or not info:
            return "another process (holder unknown)"
        return (
            f"pid {info.get('pid', '?')} on {info.get('host', '?')} "
            f"({info.get('purpose', 'writer')} since {info.get('since', '?')})"
        )
    except (OSError, ValueError):
        return "another process (holder unknown)"


class file_lock:
    """Blocking exclusive ``flock`` for short critical sections across processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> file_lock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def partition_locked(path: str) -> bool:
    """True when some process holds the flock on ``path`` (probed without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    try:
        with _registry_lock:
            if os.path.realpath(path) in _registry:
                return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
