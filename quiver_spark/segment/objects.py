"""Segments as objects of an :class:`~quiver_spark.objects.ObjectStore` (ARCHITECTURE.md
§11.2, §2): the segments location of an object root (:class:`ObjectBackend`), and a
``segment.path`` on an object store (:class:`BucketBackend`, through the client a root
there would use: obstore, or the engine's in-process store for ``memory://``).

Paths are object keys (``segments/p-0/00000000000000000001.arrow``) under :attr:`root`.
On an object root a file is one create-if-absent upload
(:func:`~quiver_spark.objects.create_or_same`): visible whole or not at all, never
replacing another file, and a retry after a lost response that finds its own bytes is a
success. Directories do not exist as objects: ``makedirs`` does nothing, ``entries`` is
derived from one listing of the directory's keys, ``subdirs`` is one listing with a
delimiter (its cost grows with the subdirectories, never with the segments inside them).
``move`` is a copy (get + create) and a delete.
"""

from __future__ import annotations

import io as _io
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from ..errors import ObjectNotFound, ObjectTaken
from ..objects import ObjectStore, create_or_same
from .backend import Fill, Level, SegmentBackend, T


class ObjectBackend(SegmentBackend):
    def __init__(self, objects: ObjectStore, root: str = "") -> None:
        self.objects = objects
        self.root = root.strip("/")

    def join(self, *parts: str) -> str:
        return "/".join(p for p in (self.root, *parts) if p)

    def display(self, path: str) -> str:
        return self.objects.display(path)

    def _children(self, directory: str) -> tuple[dict[str, int], set[str]]:
        prefix = f"{directory}/" if directory else ""
        files: dict[str, int] = {}
        dirs: set[str] = set()
        for info in self.objects.list(prefix):
            rest = info.key[len(prefix) :]
            head, slash, _ = rest.partition("/")
            if slash:
                dirs.add(head)
            else:
                files[head] = info.size
        return files, dirs

    def entries(self, directory: str, sizes: bool = False) -> dict[str, int]:
        del sizes  # listings carry sizes for free
        return self._children(directory)[0]

    def subdirs(self, directory: str) -> list[str]:
        return self.objects.list_dirs(f"{directory}/" if directory else "")

    lists_levels = True

    def level(self, directory: str, versioned: tuple[str, ...] = ()) -> Level | None:
        """One listing with a delimiter; every object comes with its version."""
        del versioned
        prefix = f"{directory}/" if directory else ""
        got = self.objects.list_level(prefix)
        return Level(got.dirs, {i.key[len(prefix) :]: i.version for i in got.objects})

    def _info_size(self, path: str) -> int | None:
        got = self.objects.info(path)  # one HEAD: a listing may lag or fail as absent
        return None if got is None else int(got.size)

    def exists(self, path: str) -> bool:
        return self.objects.head(path) is not None

    def has_file(self, path: str) -> bool:
        size = self._info_size(path)
        return bool(size)

    def size(self, path: str) -> int | None:
        return self._info_size(path)

    def read(self, path: str) -> bytes:
        got = self.objects.get(path)
        if got is None:
            raise ObjectNotFound(self.display(path))
        return got.data

    def read_small(self, path: str) -> bytes:
        return self.read(path)

    def read_many(self, paths: list[str]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for p in paths:
            got = self.objects.get(p)
            out[p] = None if got is None else got.data
        return out

    def buffer(self, path: str) -> pa.Buffer:
        return pa.py_buffer(self.read(path))

    def makedirs(self, directory: str) -> None:
        del directory  # a key's directories exist as long as it does

    def put(
        self, path: str, fill: Fill[T], *, atomic: bool = True, tmp: str = "", replace: bool = False
    ) -> T:
        """One create-if-absent upload under ``path`` (``atomic``/``tmp`` need no
        temporary name here: an upload is visible whole or not at all)."""
        del atomic, tmp
        sink = _io.BytesIO()

        def write(view: memoryview) -> None:
            sink.write(view)

        result = fill(write)
        if replace:
            self.objects.put(path, sink.getvalue())
            return result
        if not create_or_same(self.objects, path, sink.getvalue()):
            raise ObjectTaken(self.display(path), "already exists with other bytes")
        return result

    def remove(self, paths: list[str]) -> None:
        for p in paths:
            self.objects.delete(p)  # a missing key is no error

    def move(self, src: str, dst: str) -> None:
        got = self.objects.get(src)
        if got is None:
            raise ObjectNotFound(self.display(src))
        if not create_or_same(self.objects, dst, got.data):
            raise ObjectTaken(self.display(dst), "already exists with other bytes")
        self.objects.delete(src)


READ_MANY_THREADS = 16
"""At most this many reads of :meth:`BucketBackend.read_many` are in flight at once."""


class BucketBackend(ObjectBackend):
    """A ``segment.path`` on an object store (``s3://bucket/prefix``, ``gs://``,
    ``az://``, ``memory://name/prefix``): the location's own
    :class:`~quiver_spark.objects.ObjectStore`, opened from the URL with the store's
    storage options (keys relative to the URL's prefix, :attr:`root` empty). The ``.meta`` publishes there
    (:class:`~quiver_spark.segment.publish_files.FilePublication`) and one writer holds
    a partition, so a file is replaced as a POSIX rename replaces one: one
    unconditional upload under its final name, visible whole or not at all (no
    temporary name is needed, whatever ``atomic`` and ``tmp`` say); ``move`` is a get,
    an upload and a delete. ``read_many`` sends its reads together."""

    def put(
        self, path: str, fill: Fill[T], *, atomic: bool = True, tmp: str = "", replace: bool = False
    ) -> T:
        del atomic, tmp, replace  # one upload replaces what is under the name
        sink = _io.BytesIO()

        def write(view: memoryview) -> None:
            sink.write(view)

        result = fill(write)
        self.objects.put(path, sink.getvalue())
        return result

    def read_many(self, paths: list[str]) -> dict[str, bytes | None]:
        if len(paths) < 2:
            return super().read_many(paths)
        with ThreadPoolExecutor(min(READ_MANY_THREADS, len(paths))) as pool:
            got = list(pool.map(self.objects.get, paths))
        return {p: None if g is None else g.data for p, g in zip(paths, got, strict=True)}

    def move(self, src: str, dst: str) -> None:
        got = self.objects.get(src)
        if got is None:
            raise ObjectNotFound(self.display(src))
        self.objects.put(dst, got.data)
        self.objects.delete(src)
