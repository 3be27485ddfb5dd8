"""Every object store says when it wrote an object, by its own clock (ARCHITECTURE.md
§13.8): a read, a HEAD and a listing report the version's ``modified_ns`` (S3's
Last-Modified, a POSIX root's mtime, the in-process store's clock), a later write is
never stamped earlier, and a process whose wall clock is hours off does not move what
the storage stamps. The storage's clock (:class:`StorageClock`) is read from a probe
and estimated between probes without ever running ahead of it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from obstore.store import MemoryStore

from quiver_spark.errors import StorageClockUnknown
from quiver_spark.objects import ObjectInfo, ObjectStore, open_objects
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.clock import StorageClock
from quiver_spark.objects.cloud import CloudObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects
from tests.moto_server import MotoS3, unique_prefix

IMPLEMENTATIONS = ["memory", "local", "s3", "obstore-memory"]
SECOND_NS = 10**9
HOUR_NS = 3600 * SECOND_NS


@pytest.fixture(params=IMPLEMENTATIONS)
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    kind = request.param
    if kind == "memory":
        return MemoryObjects(f"when-{uuid.uuid4().hex}", "root")
    if kind == "local":
        return LocalObjects(str(tmp_path / "root"))
    if kind == "obstore-memory":
        return CloudObjects("memory:///", store=MemoryStore())
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    return open_objects(f"{moto.url}/{unique_prefix()}", moto.options)


def test_a_read_a_head_and_a_listing_say_when_the_storage_wrote_the_version(
    objects: ObjectStore,
) -> None:
    objects.create("a/k", b"one")
    got, info, listed = objects.get("a/k"), objects.info("a/k"), objects.list("a/")
    assert got is not None and info is not None and [i.key for i in listed] == ["a/k"]
    times = [got.modified_ns, info.modified_ns, listed[0].modified_ns]
    assert all(t is not None for t in times), times
    # S3 says whole seconds in a header and milliseconds in a listing
    assert max(times) - min(times) < SECOND_NS  # type: ignore[type-var, operator]


def test_a_later_write_is_never_stamped_earlier(objects: ObjectStore) -> None:
    v = objects.create("k", b"1")
    first = objects.info("k")
    objects.replace("k", b"2", version=v)
    second = objects.info("k")
    assert first is not None and second is not None
    assert first.modified_ns is not None and second.modified_ns is not None
    assert second.modified_ns >= first.modified_ns


def test_a_process_whose_wall_clock_is_off_does_not_move_what_the_storage_stamps(
    objects: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ns, real_s = time.time_ns(), time.time()
    monkeypatch.setattr(time, "time_ns", lambda: real_ns + 2 * HOUR_NS)
    monkeypatch.setattr(time, "time", lambda: real_s + 2 * 3600)
    objects.put("k", b"written by a process two hours ahead")
    info = objects.info("k")
    assert info is not None and info.modified_ns is not None
    assert abs(info.modified_ns - real_ns) < 60 * SECOND_NS


class FakeMonotonic:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_the_storage_clock_is_estimated_from_its_last_probe_and_probed_again_when_old() -> None:
    objects = CountingObjects(MemoryObjects(f"clock-{uuid.uuid4().hex}"))
    mono = FakeMonotonic()
    clock = StorageClock(objects, "CLOCK", mono_ns=mono, period_s=60)
    probed = clock.now_ns()
    info = objects.info("CLOCK")
    assert info is not None and info.modified_ns == probed
    assert objects.counts["put"] == 1
    mono.ns += 5 * SECOND_NS
    assert clock.now_ns() == probed + 5 * SECOND_NS  # no request: the last probe, advanced
    assert objects.counts["put"] == 1
    mono.ns += 60 * SECOND_NS
    again = clock.now_ns()  # a minute since the probe: probed again
    assert objects.counts["put"] == 2 and again >= probed
    assert clock.now_ns(fresh=True) >= again and objects.counts["put"] == 3


class NoTimes(MemoryObjects):
    """A store that keeps no modification times."""

    def info(self, key: str) -> ObjectInfo | None:
        got = super().info(key)
        return None if got is None else ObjectInfo(got.key, got.size, got.version)


def test_a_storage_that_tells_no_time_is_refused_as_a_clock() -> None:
    clock = StorageClock(NoTimes(f"none-{uuid.uuid4().hex}"), "CLOCK")
    with pytest.raises(StorageClockUnknown, match="reports no modification time"):
        clock.now_ns()
