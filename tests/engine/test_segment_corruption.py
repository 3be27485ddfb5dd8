"""A truncated, bit-flipped, deleted or footer-less segment, or a corrupt .meta, is caught
before any batch is served, and quarantine takes it out of the listing."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

from quiver_spark.errors import ChecksumMismatchError, CorruptionError, SegmentMissingError
from quiver_spark.segment import SegmentLocation, SegmentMeta
from tests.damage import cut_at, flip_bit
from tests.engine.segment_helpers import mixed_batch, seeded_offsets, write_simple

FLIPS = 300


@pytest.fixture
def loc(tmp_path) -> SegmentLocation:
    return SegmentLocation(str(tmp_path / "segments"))


@pytest.fixture
def seg(loc, tmp_path) -> tuple[SegmentMeta, str]:
    meta = loc.write(
        "p0",
        1,
        [mixed_batch(i * 100, 100) for i in range(30)],
        min_ingestion_ns=0,
        max_ingestion_ns=1,
        wal_ranges=[(1, 30)],
        target_batch_rows=1_000,
    )
    return meta, str(tmp_path / "segments" / "p0" / "00000000000000000001.arrow")


def _served(loc: SegmentLocation, meta: SegmentMeta) -> bool:
    """True if any batch came out of the damaged file (the failure these tests forbid)."""
    with loc.open(meta) as r:
        for b in r.batches():
            b.validate(full=True)
        return True


def _footer_len(path: str) -> int:
    with open(path, "rb") as f:
        f.seek(-10, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def test_truncation_at_every_interesting_point_is_caught_before_serving(loc, seg, tmp_path):
    meta, path = seg
    pristine = str(tmp_path / "pristine")
    shutil.copy(path, pristine)
    size = meta.size_bytes
    footer = _footer_len(path)
    points = [
        0,
        6,
        8,
        size // 3,
        size // 2,
        size - footer - 10,
        size - footer - 9,
        size - 10,
        size - 6,
        size - 1,
    ]
    detected = 0
    for cut in points:
        cut_at(path, cut)
        with pytest.raises(CorruptionError) as info:
            _served(loc, meta)
        assert info.value.path == path and "size" in info.value.reason
        detected += 1
        shutil.copy(pristine, path)
    assert detected == len(points) == 10
    assert _served(loc, meta)  # the restored file is fine


def test_lost_footer_is_caught_even_without_crc_verification(loc, seg):
    meta, path = seg
    cut_at(path, meta.size_bytes - _footer_len(path) - 10)
    with pytest.raises(CorruptionError, match="Arrow IPC file"):
        loc.open(meta, verify=False)


def test_bit_flips_at_seeded_random_offsets_are_all_detected(loc, seg):
    meta, path = seg
    offsets = seeded_offsets(meta.size_bytes, FLIPS, seed=20261125)
    detected = silent = 0
    for k, off in enumerate(offsets):
        flip_bit(path, off, bit=k % 8)
        try:
            _served(loc, meta)
            silent += 1
        except ChecksumMismatchError as e:
            assert e.path == path and e.stored == meta.checksum and e.computed != meta.checksum
            detected += 1
        flip_bit(path, off, bit=k % 8)  # restore
    assert (detected, silent) == (FLIPS, 0)


def test_arrow_alone_serves_some_flipped_bodies_which_is_why_segments_carry_a_crc(loc, seg):
    meta, path = seg
    silent = 0
    for k, off in enumerate(seeded_offsets(meta.size_bytes, 100, seed=7)):
        flip_bit(path, off, bit=k % 8)
        try:
            with loc.open(meta, verify=False) as r:
                table = r.read_all()
                table.validate(full=True)
                silent += 1
        except (CorruptionError, pa.ArrowInvalid):
            pass
        flip_bit(path, off, bit=k % 8)
    assert silent > 0


def test_a_deleted_segment_file_is_reported_missing(loc, seg):
    meta, path = seg
    os.unlink(path)
    with pytest.raises(SegmentMissingError, match=r"00000000000000000001\.arrow"):
        loc.open(meta)


def test_every_single_bit_flip_in_a_meta_file_is_detected_naming_the_file(loc, seg, tmp_path):
    meta, _ = seg
    meta_path = str(tmp_path / "segments" / "p0" / "00000000000000000001.meta")
    size = os.path.getsize(meta_path)
    detected = 0
    for off in range(size):
        flip_bit(meta_path, off, bit=off % 8)
        with pytest.raises(CorruptionError) as info:
            loc.list("p0")
        assert info.value.path == meta_path
        detected += 1
        flip_bit(meta_path, off, bit=off % 8)
    assert detected == size
    assert loc.list("p0") == [meta]


def test_a_truncated_meta_file_is_detected(loc, seg, tmp_path):
    meta_path = str(tmp_path / "segments" / "p0" / "00000000000000000001.meta")
    cut_at(meta_path, 20)
    with pytest.raises(CorruptionError, match=r"00000000000000000001\.meta"):
        loc.read_meta("p0", 1)


def test_quarantine_moves_both_files_and_hides_the_segment(loc, seg, tmp_path):
    meta, path = seg
    keep = write_simple(loc, 2)
    flip_bit(path, meta.size_bytes // 2)
    with pytest.raises(ChecksumMismatchError) as info:
        loc.open(meta)
    moved = loc.quarantine("p0", 1, str(info.value))
    qdir = tmp_path / "segments" / "p0" / "quarantine"
    assert moved == str(qdir / "00000000000000000001.arrow")
    assert sorted(os.listdir(qdir)) == [
        "00000000000000000001.arrow",
        "00000000000000000001.meta",
        "00000000000000000001.reason",
    ]
    assert "crc mismatch" in (qdir / "00000000000000000001.reason").read_text()
    assert not os.path.exists(path)
    assert loc.list("p0") == [keep]
    assert loc.quarantined_total == 1
    assert loc.partitions() == ["p0"]


def test_quarantine_of_a_segment_whose_arrow_is_gone_moves_the_meta(loc, seg, tmp_path):
    _meta, path = seg
    os.unlink(path)
    moved = loc.quarantine("p0", 1, "missing")
    assert moved.endswith("quarantine/00000000000000000001.meta")
    assert loc.list("p0") == []
