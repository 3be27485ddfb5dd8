"""Segments in a local POSIX directory (ARCHITECTURE.md §11.2, §5.4).

Every operation goes through :class:`~quiver_spark.fs.FileIO` (tests pass a recording
or failing one); files are created as ``<name>.tmp``, made read-only, fsynced, renamed
into place and the directory fsynced, so a crash leaves the old state or the new one.
"""

from __future__ import annotations

import logging
import os

import pyarrow as pa

from .. import layout
from ..format import SEGMENT_FILE_MODE
from ..fs import FileIO
from .backend import Fill, Level, SegmentBackend, T

log = logging.getLogger(__name__)


class LocalBackend(SegmentBackend):
    """A local directory: durable create (tmp, fsync, rename, fsync dir) via FileIO."""

    def __init__(self, root: str, io: FileIO) -> None:
        self.root = os.path.abspath(root)
        self.io = io

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def display(self, path: str) -> str:
        return path

    def entries(self, directory: str, sizes: bool = False) -> dict[str, int]:
        names = self.io.listdir(directory)
        return {n: (self.io.size(os.path.join(directory, n)) if sizes else 0) for n in names}

    def subdirs(self, directory: str) -> list[str]:
        return [
            n for n in self.io.listdir(directory) if self.io.exists(os.path.join(directory, n, ""))
        ]

    lists_levels = True

    def level(self, directory: str, versioned: tuple[str, ...] = ()) -> Level | None:
        """One ``scandir`` (and one stat per present file named in ``versioned``)."""
        found = self.io.scandir(directory)
        files: dict[str, str | None] = {n: None for n, is_dir in found if not is_dir}
        for n in versioned:
            if n in files:
                files[n] = self.io.stat_token(os.path.join(directory, n))
        return Level([n for n, is_dir in found if is_dir], files)

    def exists(self, path: str) -> bool:
        return self.io.exists(path)

    def has_file(self, path: str) -> bool:
        return self.io.exists(path)  # a stat: nothing cheaper locally

    def size(self, path: str) -> int | None:
        try:
            return self.io.size(path)
        except FileNotFoundError:
            return None

    def read(self, path: str) -> bytes:
        return self.io.read_file(path)

    def read_small(self, path: str) -> bytes:
        return self.io.read_file(path)

    def read_many(self, paths: list[str]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for p in paths:
            try:
                out[p] = self.io.read_file(p)
            except FileNotFoundError:
                out[p] = None
        return out

    def buffer(self, path: str) -> pa.Buffer:
        mm = pa.memory_map(path)  # zero copy; the mapping outlives the file object
        try:
            return mm.read_buffer()
        finally:
            mm.close()

    def makedirs(self, directory: str) -> None:
        self.io.mkdir(directory)

    def put(
        self, path: str, fill: Fill[T], *, atomic: bool = True, tmp: str = "", replace: bool = False
    ) -> T:
        del atomic, replace  # always tmp + rename locally: a rename replaces
        tmp = tmp or layout.tmp(path)
        self._discard(tmp)  # a stale, read-only tmp from an interrupted attempt
        fd = self.io.open_create(tmp)
        try:
            result = fill(lambda view: self.io.write(fd, view))
            self.io.chmod(tmp, SEGMENT_FILE_MODE)  # made durable by the fsync below
            self.io.fsync(fd)
        except BaseException:
            self.io.close(fd)
            self._discard(tmp)
            raise
        self.io.close(fd)
        self.io.rename(tmp, path)
        self.io.fsync_dir(os.path.dirname(path))
        return result

    def remove(self, paths: list[str]) -> None:
        self.io.durable_unlink(paths)

    def remove_found(self, paths: list[str]) -> list[str]:
        gone = [p for p in paths if self.io.exists(p)]
        self.io.durable_unlink(paths)
        return gone

    def move(self, src: str, dst: str) -> None:
        self.io.rename(src, dst)
        self.io.fsync_dir(os.path.dirname(src))
        self.io.fsync_dir(os.path.dirname(dst))

    def _discard(self, path: str) -> None:
        try:
            self.io.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:  # best effort: cleanup() removes it later
            log.warning("quiver.segment.tmp_left path=%s error=%s", path, e)
