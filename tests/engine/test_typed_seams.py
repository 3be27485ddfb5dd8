"""Each engine part satisfies the protocol the others read it through (``seams.py``).

A part that stopped satisfying one would be read the slow or wrong way without an
error: a retained index over a location that is not a ``LocationCatalog`` lists every
partition on every pass instead of probing for new segments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.retained import RetainedIndex
from quiver_spark.seams import (
    NO_DELETIONS,
    DamagedInfo,
    DeletedMarks,
    DeletedSegments,
    GaugeSource,
    LocationCatalog,
    LockedLedger,
    RetentionLedger,
    SegmentInfo,
    SubscriberNames,
)
from quiver_spark.segment import DamagedSegment
from tests.stores import int_segments


@pytest.mark.parametrize(
    "protocol",
    [DeletedSegments, SubscriberNames, RetentionLedger, LockedLedger, GaugeSource],
)
def test_the_subscriber_registry_is_what_retention_and_the_gauges_read(
    tmp_path: Path, protocol: type
) -> None:
    with QuiverStore.open(str(tmp_path), partition=None) as store:
        assert isinstance(store.subscribers, protocol)


def test_the_segment_location_and_its_segments_are_what_retention_reads(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)], partition="p-0")
    with QuiverStore.open(str(tmp_path), partition=None, create=False) as store:
        assert isinstance(store.segment_location, LocationCatalog)
        assert all(isinstance(m, SegmentInfo) for m in store.segments("p-0"))
    assert isinstance(DamagedSegment("p-0", 1, "/x", "bad crc", 0), DamagedInfo)


def test_the_store_reads_the_deleted_segments_fact_for_a_writers_recovery(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), partition=None) as store:
        assert isinstance(store, DeletedSegments)
        assert store.deleted_marks("p-0") == NO_DELETIONS  # nobody subscribed: no ack log


def test_a_long_lived_index_over_a_segment_location_probes_instead_of_listing(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)], partition="p-0")
    with QuiverStore.open(str(tmp_path), partition=None, create=False) as store:
        index = RetainedIndex(clock=lambda: 0.0)
        index.sync(store.segment_location, store.subscribers)
        assert index.surveyed  # the first sync lists every partition
        index.sync(store.segment_location, store.subscribers)
        assert not index.surveyed
        assert [s.seq for s in index.segments("p-0")] == [1, 2]


def test_deleted_marks_say_which_seqs_retention_recorded_deleted() -> None:
    marks = DeletedMarks(3, frozenset({5, 8}))
    assert [s for s in range(1, 10) if marks.holds(s)] == [1, 2, 3, 5, 8]
    assert marks.highest == 8 and DeletedMarks(4, frozenset()).highest == 4
    assert NO_DELETIONS.highest == 0 and not NO_DELETIONS.holds(1)
