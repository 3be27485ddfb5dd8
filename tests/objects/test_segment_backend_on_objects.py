"""Segments in an object root keep every promise of a segment backend (the cases of
tests/engine/test_segment_backend_contract.py run against :class:`ObjectBackend` on
the in-process store and on S3), and a segment file is created once: a second upload
of other bytes under its name is refused, a retry of the same bytes is not."""

from __future__ import annotations

import uuid

import pytest

from quiver_spark.objects import open_objects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.segment import SegmentBackend
from quiver_spark.segment.objects import ObjectBackend
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


@pytest.fixture(params=["objects-memory", "objects-s3"])
def backend(request: pytest.FixtureRequest) -> SegmentBackend:
    if request.param == "objects-memory":
        store = MemoryObjects(f"seg-{uuid.uuid4().hex}", "root")
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        store = open_objects(f"{moto.url}/{unique_prefix('seg')}", moto.options)
    return ObjectBackend(store, "segments")


def test_a_segment_file_is_created_once_and_a_retry_of_the_same_bytes_succeeds(
    backend: SegmentBackend,
) -> None:
    assert isinstance(backend, ObjectBackend)
    path = backend.join("p-0", "00000000000000000001.arrow")
    backend.put(path, lambda consume: consume(memoryview(b"segment")), atomic=False)
    backend.put(path, lambda consume: consume(memoryview(b"segment")), atomic=False)
    with pytest.raises(FileExistsError, match=r"00000000000000000001\.arrow"):
        backend.put(path, lambda consume: consume(memoryview(b"another")), atomic=False)
    assert backend.read(path) == b"segment"
