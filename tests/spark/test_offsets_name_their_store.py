"""A source offset names the store it was planned on, and one naming another store is
refused; offsets written before offsets named their store resume on any store
(ARCHITECTURE.md §17). No JVM needed."""

from __future__ import annotations

import json

import pytest

from quiver_spark.errors import ForeignCheckpointError, OffsetFormatError
from quiver_spark.spark.offsets import OFFSET_VERSION, QuiverOffset, offset_json
from quiver_spark.subscription.position import Position

STORE_A = "a" * 32
STORE_B = "b" * 32


def test_an_offset_names_the_store_it_was_planned_on_and_reads_back_the_same():
    raw = offset_json(Position({"vm-1": 4, "vm-0": 2}), STORE_A)
    assert raw == {"v": OFFSET_VERSION, "store": STORE_A, "segments": {"vm-0": 2, "vm-1": 4}}
    assert OFFSET_VERSION == 2
    back = QuiverOffset.from_json(json.loads(json.dumps(raw)))  # as Spark hands it back
    assert back == QuiverOffset(Position({"vm-0": 2, "vm-1": 4}), STORE_A)
    assert back.resumed_on(STORE_A, "/data/a") == Position({"vm-0": 2, "vm-1": 4})


def test_an_offset_naming_another_store_is_refused_naming_both_stores_the_path_and_the_remedy():
    back = QuiverOffset.from_json(offset_json(Position({"vm-0": 2}), STORE_A))
    with pytest.raises(ForeignCheckpointError) as e:
        back.resumed_on(STORE_B, "s3://bucket/b")
    msg = str(e.value)
    assert STORE_A in msg and STORE_B in msg and "s3://bucket/b" in msg
    assert "new checkpointLocation" in msg and "\n" not in msg
    assert (e.value.checkpoint_store, e.value.store) == (STORE_A, STORE_B)


def test_an_offset_written_before_offsets_named_their_store_resumes_on_any_store():
    old = {"v": 1, "segments": {"vm-0": 2}}
    back = QuiverOffset.from_json(old)
    assert back.store is None
    assert back.resumed_on(STORE_A, "/data/a") == back.resumed_on(STORE_B, "/data/b")
    assert back.position == Position({"vm-0": 2})


def test_no_offset_at_all_is_the_empty_position_of_no_store():
    assert QuiverOffset.from_json(None) == QuiverOffset(Position({}), None)


@pytest.mark.parametrize(
    "raw",
    [
        {"v": 2, "segments": {"vm-0": 1}},  # version 2 always names its store
        {"v": 2, "store": "", "segments": {}},
        {"v": 2, "store": 7, "segments": {}},
        {"v": 4, "store": STORE_A, "segments": {}},  # a newer quiver_spark's
        {"v": 3, "store": STORE_A, "segments": {"vm-0": 3}},  # version 3 holds a backlog
        {"v": 3, "store": STORE_A, "segments": {"vm-0": 3}, "backlog": {"vm-0": [2, 3]}},
        {"v": 0, "segments": {}},
        {"v": True, "segments": {}},
        {"v": 2, "store": STORE_A},
        {"v": 2, "store": STORE_A, "segments": {"vm-0": -1}},
        ["not", "an", "object"],
    ],
)
def test_a_malformed_or_newer_offset_is_refused(raw):
    with pytest.raises(OffsetFormatError):
        QuiverOffset.from_json(raw)


def test_an_offset_without_a_store_is_never_written():
    with pytest.raises(OffsetFormatError):
        QuiverOffset(Position({"vm-0": 1}), None).to_json()


def test_an_offset_with_a_backlog_is_version_3_and_reads_back():
    off = QuiverOffset(Position({"vm-0": 9}, {"vm-0": (2, 5)}), STORE_A)
    raw = off.to_json()
    assert raw == {"v": 3, "store": STORE_A, "segments": {"vm-0": 9}, "backlog": {"vm-0": [2, 5]}}
    assert QuiverOffset.from_json(raw) == off
    assert QuiverOffset(Position({"vm-0": 9}), STORE_A).to_json()["v"] == 2  # as before
