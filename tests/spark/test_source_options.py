"""Source options, offsets and planning helpers (no JVM needed)."""

from __future__ import annotations

import pytest

from quiver_spark.errors import ConfigError, OffsetFormatError
from quiver_spark.spark.offsets import QuiverOffset
from quiver_spark.spark.source_options import parse_source_options
from quiver_spark.subscribers import StartPosition
from quiver_spark.subscription.position import Position
from quiver_spark.subscription.read_tasks import split_segment

from .source_helpers import write_segments


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("startingPosition", "newest", "earliest | latest | acked"),
        ("maxSegmentsPerTrigger", "0", "an integer >= 1"),
        ("maxRowsPerTrigger", "many", "an integer >= 1"),
        ("maxBytesPerTrigger", "12 parsecs", "a size such as"),
        ("includeMetadata", "maybe", "true or false"),
        ("failOnDataLoss", "2", "true or false"),
        ("subscriber", "no/slashes", "[A-Za-z0-9_.-]"),
    ],
)
def test_a_bad_option_value_names_option_value_and_what_is_allowed(option, value, allowed):
    opts = {"path": "/tmp/q", "subscriber": "s", option.lower(): value}
    with pytest.raises(ConfigError) as e:
        parse_source_options(opts, streaming=True)
    msg = str(e.value)
    assert value in msg and allowed in msg
    assert option.lower() in msg.lower() or option == "subscriber"


def test_a_stream_requires_a_subscriber_but_a_batch_read_does_not():
    with pytest.raises(ConfigError, match="subscriber"):
        parse_source_options({"path": "/tmp/q"}, streaming=True)
    assert parse_source_options({"path": "/tmp/q"}, streaming=False).subscriber is None


def test_options_parse_case_insensitively_with_defaults():
    o = parse_source_options(
        {"path": "/tmp/q", "subscriber": "exp", "startingposition": "LATEST",
         "maxbytespertrigger": "1MB"},
        streaming=True,
    )
    assert o.starting_position is StartPosition.LATEST
    assert (o.max_bytes, o.max_segments, o.max_rows) == (1024 * 1024, 1000, None)  # the default segment limit applies too
    assert o.fail_on_data_loss and not o.include_metadata and o.limited


def test_offsets_round_trip_through_json_and_compute_ranges():
    a = Position({"p-1": 3, "p-0": 5})
    off = QuiverOffset(a, "s1")
    assert off.to_json() == {"v": 2, "store": "s1", "segments": {"p-0": 5, "p-1": 3}}
    assert QuiverOffset.from_json(off.to_json()) == off
    b = a.merged({"p-0": 9, "p-2": 1, "p-1": 2})
    assert b.segments == {"p-0": 9, "p-1": 3, "p-2": 1}
    assert a.ranges(b) == {"p-0": (6, 9), "p-2": (1, 1)}
    assert b.ranges(b) == {}


@pytest.mark.parametrize(
    "raw",
    [{"v": 3, "store": "s1", "segments": {}}, {"v": 2, "segments": {}}, {"segments": {}},
     {"v": 1}, {"v": 1, "segments": {"../x": 1}},
     {"v": 1, "segments": {"p-0": -1}}, {"v": 1, "segments": {"p-0": "3"}}],
)
def test_malformed_or_newer_offsets_are_refused(raw):
    with pytest.raises(OffsetFormatError):
        QuiverOffset.from_json(raw)


def test_large_segments_split_into_record_batch_ranges(tmp_path):
    meta = write_segments(str(tmp_path / "s"), 1, rows=10)[0]
    assert split_segment(meta, 1 << 30) == [(0, meta.batches)]
    big = meta.__class__(**{**meta.__dict__, "batches": 10, "size_bytes": 100})
    assert split_segment(big, 30) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert split_segment(big, 1) == [(i, i + 1) for i in range(10)]
