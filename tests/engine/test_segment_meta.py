"""The .meta body: strict decoding of every key, forward-compatible extras, frame checks."""

from __future__ import annotations

import os

import pytest

from quiver_spark.errors import CorruptionError, VersionError
from quiver_spark.format import MAGIC_STATE, encode_frame
from quiver_spark.segment import SegmentLocation, SegmentMeta

PATH = "segments/p0/00000000000000000003.meta"

GOOD = SegmentMeta(
    partition="p0",
    seq=3,
    rows=10,
    size_bytes=1234,
    batches=1,
    min_ingestion_ns=5,
    max_ingestion_ns=9,
    event_time_column="ts",
    min_event_time=-1,
    max_event_time=7,
    schema_fingerprint="ab" * 32,
    checksum=0xDEADBEEF,
    wal_ranges=((1, 4), (6, 6)),
    created_ns=123,
)


def test_body_round_trips_through_the_frame():
    assert SegmentMeta.decode(PATH, GOOD.encode()) == GOOD
    assert SegmentMeta.from_body(PATH, GOOD.to_body()) == GOOD


def test_unknown_keys_are_ignored():
    body = {**GOOD.to_body(), "added_in_v2": {"x": 1}}
    assert SegmentMeta.from_body(PATH, body) == GOOD


@pytest.mark.parametrize("key", list(GOOD.to_body()))
def test_every_key_is_required(key):
    body = GOOD.to_body()
    del body[key]
    with pytest.raises(CorruptionError, match=f"lacks key '{key}'") as info:
        SegmentMeta.from_body(PATH, body)
    assert info.value.path == PATH


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("seq", "3"),
        ("rows", True),
        ("rows", 1.5),
        ("partition", 7),
        ("event_time_column", 3),
        ("min_event_time", "x"),
        ("schema_fingerprint", None),
        ("wal_ranges", [[1]]),
        ("wal_ranges", [[5, 4]]),
        ("wal_ranges", "1-4"),
        ("rows", -1),
        ("seq", 0),
        ("checksum", 1 << 32),
    ],
)
def test_ill_typed_or_out_of_range_values_are_corruption(key, value):
    body = {**GOOD.to_body(), key: value}
    with pytest.raises(CorruptionError) as info:
        SegmentMeta.from_body(PATH, body)
    assert info.value.path == PATH


def test_optional_values_may_be_none():
    body = {**GOOD.to_body(), "event_time_column": None, "min_event_time": None}
    body["max_event_time"] = None
    meta = SegmentMeta.from_body(PATH, body)
    assert (meta.event_time_column, meta.min_event_time, meta.max_event_time) == (None,) * 3


def test_a_frame_of_another_kind_is_refused():
    with pytest.raises(VersionError, match="magic"):
        SegmentMeta.decode(PATH, encode_frame(MAGIC_STATE, GOOD.to_body()))


def test_a_meta_that_names_another_segment_is_corruption(tmp_path):
    loc = SegmentLocation(str(tmp_path))
    os.makedirs(tmp_path / "p0")
    (tmp_path / "p0" / "00000000000000000004.meta").write_bytes(GOOD.encode())
    with pytest.raises(CorruptionError, match="names p0/3"):
        loc.list("p0")
