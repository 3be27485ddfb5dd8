"""Segments behind an fsspec URL: every ``segment.path`` whose scheme is neither local nor
an object store's (``hdfs://``, any installed fsspec protocol; ARCHITECTURE.md §5).
Object stores (``s3://``, ``gs://``, ``az://``, and the engine's in-process
``memory://``) go through the store a root there opens instead
(:class:`~.objects.BucketBackend`).

An ``.arrow`` is uploaded under its final key in one request; a ``.meta`` goes to a
``.tmp`` key first and is moved, so a torn upload of it never appears under the
published name (a filesystem behind fsspec need not make a write visible whole). Every probe
drops fsspec's listing cache first: a file another process made must be seen.
fsspec stays inside this module; :attr:`RemoteBackend.fs` is for tests that inject
request faults.
"""

from __future__ import annotations

import io as _io
from collections.abc import Mapping
from typing import Any

import fsspec
import pyarrow as pa

from .. import layout
from .backend import Fill, SegmentBackend, T


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


class RemoteBackend(SegmentBackend):
    """An fsspec filesystem: single-request uploads; a moved ``.tmp`` where a whole
    file must never appear torn under its final name."""

    def __init__(self, url: str, storage_options: Mapping[str, object]) -> None:
        self.fs: fsspec.AbstractFileSystem
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")

    def join(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def display(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def _ls(self, directory: str) -> list[dict[str, Any]]:
        self.fs.invalidate_cache(directory)
        try:
            return list(self.fs.ls(directory, detail=True))
        except FileNotFoundError:
            return []

    def entries(self, directory: str, sizes: bool = False) -> dict[str, int]:
        del sizes  # listings carry sizes for free
        return {
            e["name"].rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0)
            for e in self._ls(directory)
            if e.get("type") != "directory"
        }

    def subdirs(self, directory: str) -> list[str]:
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1]
            for e in self._ls(directory)
            if e.get("type") == "directory"
        )

    def exists(self, path: str) -> bool:
        self.fs.invalidate_cache(_parent(path))
        return bool(self.fs.exists(path))

    def has_file(self, path: str) -> bool:
        """One ranged read, where an object store's ``exists`` of a missing key costs a
        HEAD and a listing."""
        try:
            self.fs.cat_file(path, start=0, end=1)
        except FileNotFoundError:
            return False
        return True

    def size(self, path: str) -> int | None:
        self.fs.invalidate_cache(_parent(path))
        try:
            return int(self.fs.size(path))
        except FileNotFoundError:
            return None

    def read(self, path: str) -> bytes:
        self.fs.invalidate_cache(_parent(path))  # a listing cached earlier in
        return bytes(self.fs.cat_file(path))  # this process must not hide a new file

    def read_small(self, path: str) -> bytes:
        """One request (no size lookup first, unlike :meth:`read`)."""
        self.fs.invalidate_cache(_parent(path))
        return bytes(self.fs.cat_file(path, start=0))

    def read_many(self, paths: list[str]) -> dict[str, bytes | None]:
        """One request each, sent together."""
        for d in {_parent(p) for p in paths}:
            self.fs.invalidate_cache(d)
        got = self.fs.cat(paths, on_error="return", start=0)
        out: dict[str, bytes | None] = {}
        for p in paths:
            v = got.get(p, FileNotFoundError(p))
            if isinstance(v, FileNotFoundError):
                out[p] = None
            elif isinstance(v, BaseException):
                raise v
            else:
                out[p] = bytes(v)
        return out

    def buffer(self, path: str) -> pa.Buffer:
        return pa.py_buffer(self.read(path))

    def makedirs(self, directory: str) -> None:
        self.fs.makedirs(directory, exist_ok=True)

    def put(
        self, path: str, fill: Fill[T], *, atomic: bool = True, tmp: str = "", replace: bool = False
    ) -> T:
        del replace  # an upload replaces what is under the name
        sink = _io.BytesIO()

        def write(view: memoryview) -> None:
            sink.write(view)

        result = fill(write)
        data = sink.getvalue()
        if not atomic:
            self.fs.pipe_file(path, data)
            return result
        tmp = tmp or layout.tmp(path)
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)
        return result

    def remove(self, paths: list[str]) -> None:
        self.remove_found(paths)

    def remove_found(self, paths: list[str]) -> list[str]:
        """One delete each; the ones that raised FileNotFoundError did not exist."""
        gone = []
        for p in paths:
            try:
                self.fs.rm_file(p)
                gone.append(p)
            except FileNotFoundError:
                continue
        if paths:
            self.fs.invalidate_cache(_parent(paths[0]))
        return gone

    def move(self, src: str, dst: str) -> None:
        self.fs.mv(src, dst)
