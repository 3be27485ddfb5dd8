"""A published seq without a ``.meta`` is classified from the ack log and the segment
location: deleted by retention (expected), quarantined or missing (data loss)."""

from __future__ import annotations

import os
from pathlib import Path

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.dataloss import evidence
from quiver_spark.errors import MissingKind, SegmentMissingError
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from tests.stores import int_segments

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))


def _segments(root: Path, n: int) -> None:
    int_segments(root, [(i, 1) for i in range(n)], column="x")


def test_deleted_quarantined_and_vanished_seqs_are_told_apart(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _segments(root, 6)
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        with SubscriberRegistry.open(str(root)) as reg:
            reg.register("a", retained={"p-0": [1, 2, 3, 4, 5, 6]})
            reg.record("a", "p-0", [1], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1]}
        store.segment_location.quarantine("p-0", 3, "segment crc mismatch at offset 200")
        for suffix in (".meta", ".arrow"):
            os.remove(root / "segments" / "p-0" / f"{4:020d}{suffix}")
        with SubscriberRegistry.open(str(root)) as reg:
            ev = evidence(store.segment_location, reg, "p-0")

    assert ev.highest == 6
    assert ev.classify(2) is None
    gone = ev.classify(1)
    assert gone is not None and gone.kind == MissingKind.DELETED and not gone.data_loss
    quarantined, vanished = ev.losses()
    assert (quarantined.seq, quarantined.kind, vanished.seq, vanished.kind) == (
        3,
        MissingKind.QUARANTINED,
        4,
        MissingKind.MISSING,
    )
    assert quarantined.evidence is not None
    assert quarantined.evidence.endswith(f"p-0/quarantine/{3:020d}.reason")
    assert "segment crc mismatch at offset 200" in quarantined.note
    err = quarantined.error("set failOnDataLoss=false to skip it")
    assert isinstance(err, SegmentMissingError)
    assert (err.partition, err.seq, err.kind) == ("p-0", 3, MissingKind.QUARANTINED)
    assert err.evidence == quarantined.evidence
    assert "segment 3 of partition p-0 is quarantined" in str(err)
    assert quarantined.evidence in str(err) and "failOnDataLoss" in str(err)
    assert "segment 4 of partition p-0 is missing" in str(vanished.error())
    assert ev.first_unread() == 2


def test_a_new_subscriber_starts_at_a_lost_first_segment_not_after_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _segments(root, 3)
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        store.segment_location.quarantine("p-0", 1, "footer unreadable")
        ev = evidence(store.segment_location, None, "p-0")
    assert sorted(ev.published) == [2, 3]
    assert [m.seq for m in ev.losses()] == [1]
    assert ev.first_unread() == 1


def test_the_last_segment_quarantined_is_still_known_to_have_been_published(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    _segments(root, 3)
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        store.segment_location.quarantine("p-0", 3, "bad")
        store.segment_location.quarantine("p-0", 3, "bad again")  # a second reason file
        ev = evidence(store.segment_location, None, "p-0")
    assert ev.highest == 3 and [(m.seq, m.kind) for m in ev.losses()] == [
        (3, MissingKind.QUARANTINED)
    ]


def test_deleted_seqs_cost_nothing_to_skip(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _segments(root, 1)
    with SubscriberRegistry.open(str(root)) as reg, reg.exclusive():
        reg.condemn({"p-0": list(range(2, 300_002))})
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        with SubscriberRegistry.open(str(root)) as reg:
            ev = evidence(store.segment_location, reg, "p-0")
    assert ev.highest == 300_001 and ev.losses() == [] and ev.first_unread() == 1
