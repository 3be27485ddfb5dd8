"""Every segment backend keeps the same promises: a missing file reads as missing, a
file appears whole under its name or not at all, removal takes a missing file as
removed (and reports what existed when asked to), and the URL alone picks the backend. The same cases run against each implementation, so a new
backend is checked by adding it to ``BACKENDS``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec
import pytest

from quiver_spark.fs import DEFAULT_IO
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.segment import SegmentBackend
from quiver_spark.segment.backend import Consume
from quiver_spark.segment.backends import open_backend
from quiver_spark.segment.local import LocalBackend
from quiver_spark.segment.objects import BucketBackend
from quiver_spark.segment.remote import RemoteBackend
from tests.engine.segment_helpers import FsspecMemoryFS

BACKENDS = ["local", "fsspec", "memory"]
"""A POSIX directory, an fsspec filesystem (``fsspecmem://``: fsspec's in-memory one under
a scheme of its own) and the engine's in-process object store (``memory://``, as a root
there; its S3 counterpart: tests/objects/...keeps_the_backend_contract.py)."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SegmentBackend]:
    if request.param == "local":
        yield open_backend(str(tmp_path / "segments"), io=DEFAULT_IO)
        return
    if request.param == "memory":
        chosen = open_backend(f"memory://contract-{uuid.uuid4().hex}/segs", io=DEFAULT_IO)
        assert isinstance(chosen, BucketBackend) and isinstance(chosen.objects, MemoryObjects)
        yield chosen
        chosen.remove([info.key for info in chosen.objects.list("")])
        return
    url = f"{FsspecMemoryFS.protocol}://contract-{uuid.uuid4().hex}"
    yield open_backend(url, io=DEFAULT_IO)
    fs = fsspec.filesystem(FsspecMemoryFS.protocol)
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _chunks(*parts: bytes) -> Callable[[Consume], int]:
    def fill(consume: Consume) -> int:
        for p in parts:
            consume(memoryview(p))
        return sum(map(len, parts))

    return fill


def _put_in_partition(backend: SegmentBackend, name: str, data: bytes) -> str:
    backend.makedirs(backend.join("p-0"))
    path = backend.join("p-0", name)
    backend.put(path, _chunks(data))
    return path


def test_a_missing_file_reads_as_missing_from_every_operation(backend: SegmentBackend) -> None:
    path = backend.join("p-0", "00000000000000000001.meta")
    assert backend.size(path) is None
    assert not backend.exists(path)
    assert not backend.has_file(path)
    assert backend.read_many([path]) == {path: None}
    assert backend.entries(backend.join("p-0")) == {}
    for read in (backend.read, backend.read_small, backend.buffer):
        with pytest.raises(FileNotFoundError):
            read(path)


def test_put_returns_what_fill_computed_and_every_read_returns_the_bytes(
    backend: SegmentBackend,
) -> None:
    backend.makedirs(backend.join("p-0"))
    path = backend.join("p-0", "00000000000000000001.arrow")
    assert backend.put(path, _chunks(b"head-", b"body"), atomic=False) == 9
    assert backend.read(path) == backend.read_small(path) == b"head-body"
    assert backend.buffer(path).to_pybytes() == b"head-body"
    assert backend.read_many([path]) == {path: b"head-body"}
    assert backend.size(path) == 9
    assert backend.exists(path) and backend.has_file(path)
    assert backend.entries(backend.join("p-0"), sizes=True) == {"00000000000000000001.arrow": 9}


def test_a_fill_that_fails_leaves_nothing_under_any_name(backend: SegmentBackend) -> None:
    backend.makedirs(backend.join("p-0"))
    path = backend.join("p-0", "00000000000000000001.meta")

    def fill(consume: Consume) -> None:
        consume(memoryview(b"half of a"))
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="the disk went away"):
        backend.put(path, fill)
    assert not backend.exists(path)
    assert backend.entries(backend.join("p-0")) == {}


def test_a_put_under_its_own_temporary_name_leaves_only_the_final_file(
    backend: SegmentBackend,
) -> None:
    path = backend.join("QUARANTINE")
    backend.makedirs(backend.root)
    backend.put(path, _chunks(b"mark"), tmp=f"{path}.0123abcd.tmp")
    assert backend.read(path) == b"mark"
    assert set(backend.entries(backend.root)) == {"QUARANTINE"}


def test_remove_found_reports_the_files_that_existed_and_removes_them(
    backend: SegmentBackend,
) -> None:
    kept = _put_in_partition(backend, "00000000000000000002.arrow", b"b")
    gone = _put_in_partition(backend, "00000000000000000001.arrow", b"a")
    never = backend.join("p-0", "00000000000000000009.arrow")
    assert backend.remove_found([gone, never]) == [gone]
    assert not backend.exists(gone)
    assert backend.read(kept) == b"b"


def test_remove_removes_the_files_and_takes_a_missing_one_as_removed(
    backend: SegmentBackend,
) -> None:
    kept = _put_in_partition(backend, "00000000000000000002.arrow", b"b")
    gone = _put_in_partition(backend, "00000000000000000001.arrow", b"a")
    never = backend.join("p-0", "00000000000000000009.arrow")
    backend.remove([gone, never])
    assert not backend.exists(gone) and not backend.exists(never)
    assert backend.read(kept) == b"b"


def test_move_puts_the_same_bytes_under_the_new_name_only(backend: SegmentBackend) -> None:
    src = _put_in_partition(backend, "00000000000000000001.meta", b"meta bytes")
    backend.makedirs(backend.join("p-0", "quarantine"))
    dst = backend.join("p-0", "quarantine", "00000000000000000001.meta")
    backend.move(src, dst)
    assert backend.read(dst) == b"meta bytes"
    assert not backend.exists(src)


def test_subdirectories_are_listed_by_name(backend: SegmentBackend) -> None:
    _put_in_partition(backend, "00000000000000000001.meta", b"x")
    assert backend.subdirs(backend.root) == ["p-0"]


def test_paths_are_shown_with_the_location_they_belong_to(backend: SegmentBackend) -> None:
    shown = backend.display(backend.join("p-0", "00000000000000000001.arrow"))
    assert shown.endswith("/p-0/00000000000000000001.arrow")
    if isinstance(backend, RemoteBackend):
        assert shown.startswith(f"{FsspecMemoryFS.protocol}://")
    if isinstance(backend, BucketBackend) and isinstance(backend.objects, MemoryObjects):
        assert shown.startswith("memory://")


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("{tmp}/segments", LocalBackend),
        ("file://{tmp}/segments", LocalBackend),
        ("memory://choice", BucketBackend),
        (f"{FsspecMemoryFS.protocol}://choice", RemoteBackend),
        ("s3://bucket/segments", BucketBackend),
    ],
)
def test_the_url_alone_chooses_the_backend(tmp_path: Path, url: str, kind: type) -> None:
    chosen = open_backend(url.format(tmp=tmp_path), io=DEFAULT_IO)
    assert type(chosen) is kind
    if kind is LocalBackend:
        assert chosen.root == str(tmp_path / "segments")
