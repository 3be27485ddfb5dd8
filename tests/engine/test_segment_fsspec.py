"""Segments on fsspec filesystems: fsspec's in-memory filesystem under a scheme of its own
(``fsspecmem://``), and injected upload failures. (A ``segment.path`` on an object store,
``memory://`` included, goes through the store a root there opens instead:
tests/engine/test_a_segment_path_on_an_object_store_goes_through_the_roots_client.py.)"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Iterator

import fsspec
import pyarrow as pa
import pytest

from quiver_spark.errors import ChecksumMismatchError, SegmentExistsError, SegmentMissingError
from quiver_spark.segment import SegmentLocation
from quiver_spark.segment.remote import RemoteBackend
from tests.engine.segment_helpers import (
    FlakyMemoryFS,
    FsspecMemoryFS,
    int_batches,
    mixed_batch,
    write_simple,
)

fsspec.register_implementation(FlakyMemoryFS.protocol, FlakyMemoryFS, clobber=True)


def _round_trip(loc: SegmentLocation) -> None:
    batches = [mixed_batch(i * 50, 50) for i in range(40)]
    m1 = loc.write(
        "p0",
        1,
        batches,
        min_ingestion_ns=1,
        max_ingestion_ns=2,
        wal_ranges=[(1, 40)],
        event_time_column="ts",
        target_batch_rows=500,
    )
    m2 = write_simple(loc, 2)
    m3 = write_simple(loc, 1, partition="p1")
    assert loc.partitions() == ["p0", "p1"]
    assert loc.list("p0") == [m1, m2]
    assert (m1.rows, m1.batches) == (2000, 4)
    with loc.open(m1) as r:
        assert r.read_all().equals(pa.Table.from_batches(batches))
    assert loc.total_bytes() == sum(m.size_bytes + len(m.encode()) for m in (m1, m2, m3))
    with pytest.raises(SegmentExistsError):
        loc.write(
            "p0", 2, int_batches(1, 1), min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[(1, 1)]
        )
    assert write_simple(loc, 2) == m2  # an identical retry is idempotent
    loc.delete("p0", [1])
    loc.delete("p0", [1])
    assert loc.list("p0") == [m2]
    with pytest.raises(SegmentMissingError):
        loc.open(m1)


def test_fsspec_filesystem_round_trip():
    loc = SegmentLocation(f"{FsspecMemoryFS.protocol}://seg-{uuid.uuid4().hex}")
    assert isinstance(loc.backend, RemoteBackend)
    _round_trip(loc)


def test_fsspec_filesystem_detects_a_flipped_bit_and_quarantines():
    loc = SegmentLocation(f"{FsspecMemoryFS.protocol}://seg-{uuid.uuid4().hex}")
    meta = write_simple(loc, 1)
    fs = fsspec.filesystem(FsspecMemoryFS.protocol)
    path = loc.backend.join("p0", "00000000000000000001.arrow")
    raw = bytearray(fs.cat_file(path))
    raw[len(raw) // 2] ^= 0x10
    fs.pipe_file(path, bytes(raw))
    with pytest.raises(ChecksumMismatchError, match=r"00000000000000000001\.arrow"):
        loc.open(meta)
    moved = loc.quarantine("p0", 1, "crc")
    assert moved.endswith("p0/quarantine/00000000000000000001.arrow")
    assert loc.list("p0") == []
    assert loc.cleanup("p0").max_seq_seen == 1


# -- injected upload failures --------------------------------------------------------


@pytest.fixture
def flaky() -> Iterator[SegmentLocation]:
    FlakyMemoryFS.plan = {}
    yield SegmentLocation(f"flakymem://seg-{uuid.uuid4().hex}")
    FlakyMemoryFS.plan = {}


@pytest.mark.parametrize(
    ("target", "mode"), list(itertools.product([".arrow", ".meta.tmp"], ["fail", "partial"]))
)
def test_a_failed_upload_is_never_published_and_a_retry_publishes_it(flaky, target, mode):
    FlakyMemoryFS.plan = {target: [mode]}
    with pytest.raises(ConnectionError, match="injected"):
        write_simple(flaky, 1)
    assert flaky.list("p0") == []
    assert not flaky.is_published("p0", 1)
    meta = write_simple(flaky, 1)  # same seq, same data: idempotent retry
    assert flaky.list("p0") == [meta]
    with flaky.open(meta) as r:
        assert r.read_all().column("v").to_pylist() == list(range(1_000_000, 1_010_000))


def test_cleanup_after_a_partial_upload_removes_the_debris_and_keeps_the_floor(flaky):
    FlakyMemoryFS.plan = {".arrow": ["partial"]}
    with pytest.raises(ConnectionError):
        write_simple(flaky, 3)
    FlakyMemoryFS.plan = {".meta.tmp": ["partial"]}
    with pytest.raises(ConnectionError):
        write_simple(flaky, 4)
    report = flaky.cleanup("p0")
    assert sorted(p.rsplit("/", 1)[-1] for p in report.removed) == [
        "00000000000000000003.arrow",
        "00000000000000000004.arrow",
        "00000000000000000004.meta.tmp",
    ]
    assert report.max_seq_seen == 4
    assert flaky.list("p0") == []


def test_random_upload_failures_leave_only_whole_segments_listed(flaky):
    rng = random.Random(16)
    published = {}
    attempts = failures = 0
    for seq in range(1, 41):
        FlakyMemoryFS.plan = {
            ".arrow": [rng.choice(["ok", "ok", "fail", "partial"])],
            ".meta.tmp": [rng.choice(["ok", "ok", "fail", "partial"])],
        }
        while True:
            attempts += 1
            try:
                published[seq] = write_simple(flaky, seq)
                break
            except ConnectionError:
                failures += 1
                assert flaky.list("p0") == list(published.values())
                if rng.random() < 0.5:
                    flaky.cleanup("p0")
    listed = flaky.list("p0")
    assert [m.seq for m in listed] == list(range(1, 41))
    for meta in listed:
        with flaky.open(meta) as r:  # every listed segment verifies whole
            assert r.read_all().num_rows == 10_000
    assert failures > 10 and attempts == 40 + failures


@pytest.mark.parametrize("where", ["fsspec", "memory", "local"])
def test_probe_next_finds_what_was_published_since_and_names_damage(
    where: str, tmp_path: object
) -> None:
    url = {
        "fsspec": f"{FsspecMemoryFS.protocol}://probe-{uuid.uuid4().hex}",
        "memory": f"memory://probe-{uuid.uuid4().hex}",  # the in-process object store
        "local": str(tmp_path),
    }[where]
    loc = SegmentLocation(url)
    for seq in (1, 2, 3, 4):
        write_simple(loc, seq)
    write_simple(loc, 1, partition="p1")
    fresh = SegmentLocation(url)  # another process: nothing cached
    meta2 = fresh._paths("p0", 2)[1]
    raw = bytearray(fresh.backend.read_small(meta2))
    raw[-1] ^= 0xFF
    fresh.backend.put(meta2, lambda consume: consume(memoryview(bytes(raw))))
    found = fresh.probe_next({"p0": 1, "p1": 2, "p9": 1})
    assert [type(f).__name__ for f in found["p0"]] == [
        "SegmentMeta", "DamagedSegment", "SegmentMeta", "SegmentMeta",
    ]  # fmt: skip
    assert [f.seq for f in found["p0"]] == [1, 2, 3, 4]
    assert found["p1"] == [] and found["p9"] == []
    loc.delete("p0", [3])  # a hole: gone before this reader saw it
    again = SegmentLocation(url)
    assert [f.seq for f in again.probe_next({"p0": 3})["p0"]] == []
    skipped = again.probe_next({"p0": 3}, skip=lambda p, s: s == 3)
    assert [f.seq for f in skipped["p0"]] == [4]
