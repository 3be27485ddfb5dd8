"""A ``segment.path`` on an object store keeps every promise of a segment backend (the
cases of tests/engine/test_segment_backend_contract.py run against
:class:`BucketBackend` on the in-process store and on S3), and a file put again is
replaced, as a rename replaces one in a POSIX location: the ``.meta`` publishes there,
and a writer's retry rewrites an ``.arrow`` an earlier attempt left."""

from __future__ import annotations

import uuid

import pytest

from quiver_spark.fs import DEFAULT_IO
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.segment import SegmentBackend
from quiver_spark.segment.backends import open_backend
from quiver_spark.segment.objects import BucketBackend
from tests.engine.test_segment_backend_contract import (  # the contract, run here too
    test_a_fill_that_fails_leaves_nothing_under_any_name,
    test_a_missing_file_reads_as_missing_from_every_operation,
    test_a_put_under_its_own_temporary_name_leaves_only_the_final_file,
    test_move_puts_the_same_bytes_under_the_new_name_only,
    test_paths_are_shown_with_the_location_they_belong_to,
    test_put_returns_what_fill_computed_and_every_read_returns_the_bytes,
    test_remove_found_reports_the_files_that_existed_and_removes_them,
    test_remove_removes_the_files_and_takes_a_missing_one_as_removed,
    test_subdirectories_are_listed_by_name,
)
from tests.moto_server import MotoS3, unique_prefix

__all__ = [
    "test_a_fill_that_fails_leaves_nothing_under_any_name",
    "test_a_missing_file_reads_as_missing_from_every_operation",
    "test_a_put_under_its_own_temporary_name_leaves_only_the_final_file",
    "test_move_puts_the_same_bytes_under_the_new_name_only",
    "test_paths_are_shown_with_the_location_they_belong_to",
    "test_put_returns_what_fill_computed_and_every_read_returns_the_bytes",
    "test_remove_found_reports_the_files_that_existed_and_removes_them",
    "test_remove_removes_the_files_and_takes_a_missing_one_as_removed",
    "test_subdirectories_are_listed_by_name",
]


@pytest.fixture(params=["bucket-memory", "bucket-s3"])
def backend(request: pytest.FixtureRequest) -> SegmentBackend:
    if request.param == "bucket-memory":
        return BucketBackend(MemoryObjects(f"seg-{uuid.uuid4().hex}", "segs"))
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    url = f"{moto.url}/{unique_prefix('segpath')}"
    chosen = open_backend(url, io=DEFAULT_IO, storage_options=moto.options)
    assert isinstance(chosen, BucketBackend)
    assert chosen.display(chosen.join("p-0", "x.arrow")) == f"{url}/p-0/x.arrow"
    return chosen


def test_a_file_put_again_is_replaced_as_a_rename_replaces_it(backend: SegmentBackend) -> None:
    path = backend.join("p-0", "00000000000000000001.arrow")
    backend.put(path, lambda consume: consume(memoryview(b"torn attempt")), atomic=False)
    backend.put(path, lambda consume: consume(memoryview(b"segment")), atomic=False)
    assert backend.read(path) == b"segment"
    meta = backend.join("p-0", "00000000000000000001.meta")
    backend.put(meta, lambda consume: consume(memoryview(b"meta")))
    backend.put(meta, lambda consume: consume(memoryview(b"meta again")))
    assert backend.read(meta) == b"meta again"
    assert set(backend.entries(backend.join("p-0"))) == {
        "00000000000000000001.arrow", "00000000000000000001.meta",
    }, "no temporary object is left"  # fmt: skip


def test_small_files_read_together_come_back_each_under_its_own_name(
    backend: SegmentBackend,
) -> None:
    paths = [backend.join(f"p-{i}", "00000000000000000001.meta") for i in range(40)]
    for i, p in enumerate(paths[::2]):
        backend.put(p, lambda consume, i=i: consume(memoryview(f"meta {i}".encode())))
    got = backend.read_many(paths)
    assert got == {
        p: (f"meta {i // 2}".encode() if i % 2 == 0 else None) for i, p in enumerate(paths)
    }
