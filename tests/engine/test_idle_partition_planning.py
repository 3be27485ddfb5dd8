"""Planning does not grow with a partition's deleted history.

A partition whose every segment was acknowledged and deleted (an executor slot no
longer written) holds no retained seq in a consumer's view; each trigger still
probes it for new segments, from past the seqs the ack log records deleted, so the
work per idle partition per trigger is a constant however many seqs were deleted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import int_segments

DELETED = 120


def retired_slot(root: Path) -> None:
    """p-1 published ``DELETED`` segments, all acknowledged and deleted; p-0 is live."""
    int_segments(root, [(0, 1)], partition="p-0")
    int_segments(root, [(100 + i, 1) for i in range(DELETED)], partition="p-1")
    with Subscription.open(str(root), "r") as sub:
        sub.start()
        sub.ack(Position({"p-1": DELETED}))  # the only subscriber: retention deletes them
    assert not list((root / "segments" / "p-1").glob("*.meta"))


def counted(sub: Subscription, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the per-seq work of planning: deleted-seq checks and metadata reads."""
    calls = {"is_deleted": 0, "reads": 0}
    real_deleted, real_read = sub.registry.is_deleted, sub.location._b.read_many

    def is_deleted(p: str, seq: int) -> bool:
        calls["is_deleted"] += 1
        return real_deleted(p, seq)

    def read_many(paths: list[str]) -> dict[str, bytes | None]:
        calls["reads"] += len(paths)
        return real_read(paths)

    monkeypatch.setattr(sub.registry, "is_deleted", is_deleted)
    monkeypatch.setattr(sub.location._b, "read_many", read_many)
    return calls


def test_a_partition_whose_every_segment_was_deleted_costs_constant_work_per_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retired_slot(tmp_path)
    with Subscription.open(str(tmp_path), "r") as sub:
        start = Position({"p-0": 0, "p-1": DELETED})
        first = sub.next_batch_end(start)  # the first plan lists every partition: p-1 has no seq
        assert first == Position({"p-0": 1, "p-1": DELETED})
        calls = counted(sub, monkeypatch)
        for _ in range(3):
            assert sub.next_batch_end(first) == first
        # per trigger: a check or two and one probe read per partition
        assert calls["is_deleted"] <= 3 * 2, calls
        assert calls["reads"] <= 3 * (1 + 2), calls  # the quarantine mark, a probe each


def test_a_segment_published_after_the_deleted_history_is_found_by_the_next_trigger(
    tmp_path: Path,
) -> None:
    retired_slot(tmp_path)
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(Position({"p-0": 0, "p-1": DELETED}))
        # the slot is written again: its writer continues after the deleted seqs
        int_segments(tmp_path, [(200, 2)], partition="p-1")
        end = sub.next_batch_end(first)
        assert end == Position({"p-0": 1, "p-1": DELETED + 1})
        (meta,) = sub.segments(first, end)
        assert (meta.partition, meta.seq) == ("p-1", DELETED + 1)
