"""A batch read's plan, made by the engine: segments whose statistics show that no row
can match the pushed comparisons are skipped, every other retained segment is read once,
and a published segment that is gone follows the data-loss policy (ARCHITECTURE.md §17).
No JVM: the Spark batch reader only turns Spark's filters into these comparisons."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.config import SegmentConfig, StoreConfig
from quiver_spark.errors import DataLossError
from quiver_spark.subscription import (
    Comparison,
    lost_report,
    open_store,
    plan_batch_read,
    read_task,
)
from tests.stores import int_segments

EVENT_TIME = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600, event_time_column="k"))


def _planned(
    root: Path, *, fail_on_data_loss: bool, comparisons: list[Comparison] | None = None
) -> tuple[list[int], list[int]]:
    """The seqs the plan reads, and the ``k`` values its tasks serve."""
    store = open_store(str(root))
    try:
        tasks = plan_batch_read(
            store,
            fail_on_data_loss=fail_on_data_loss,
            split_size_bytes=64 << 20,
            comparisons=comparisons or [],
        )
    finally:
        store.close()
    seqs = [m.seq for t in tasks for m in t.metas]
    ks = [k for t in tasks for _, _, b in read_task(t) for k in b.column("k").to_pylist()]
    return seqs, ks


@pytest.fixture
def three(tmp_path: Path) -> Path:
    int_segments(tmp_path / "s", [(0, 10), (10, 10), (20, 10)], config=EVENT_TIME)
    return tmp_path / "s"


def test_a_comparison_skips_the_segments_no_row_of_which_can_match(three: Path) -> None:
    seqs, ks = _planned(three, fail_on_data_loss=True, comparisons=[("k", "ge", [15])])
    assert seqs == [2, 3] and ks == list(range(10, 30))  # rows are the caller's to filter
    seqs, _ = _planned(three, fail_on_data_loss=True, comparisons=[("k", "in", [3, 25])])
    assert seqs == [1, 3]


def test_without_a_usable_comparison_every_segment_is_read(three: Path) -> None:
    unusable: list[list[Comparison]] = [
        [],
        [("k", "ne", [5])],
        [("missing", "lt", [0])],
        [("k", "lt", ["x"])],
    ]
    for comparisons in unusable:
        seqs, ks = _planned(three, fail_on_data_loss=True, comparisons=comparisons)
        assert seqs == [1, 2, 3] and ks == list(range(30)), comparisons


def test_a_vanished_segment_fails_the_plan_or_is_skipped_and_counted(three: Path) -> None:
    for path in (three / "segments" / "p-0").glob("00000000000000000002.*"):
        path.unlink()
    with pytest.raises(DataLossError, match="segment 2 of partition p-0"):
        _planned(three, fail_on_data_loss=True)
    seqs, ks = _planned(three, fail_on_data_loss=False)
    assert seqs == [1, 3] and ks == [*range(10), *range(20, 30)]
    assert [s["seq"] for s in lost_report(str(three), None)["segments"]] == [2]


def test_on_an_object_root_a_skipped_segment_is_reported_from_the_bucket(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost-segment log of a batch read on an object root is the bucket's
    ``readers/`` object, and the report reads it there (never a local path named
    after the URL)."""
    from quiver_spark.objects.memory import MemoryObjects

    monkeypatch.chdir(tmp_path)  # a local path named after the URL would land here
    root = f"memory://{bucket}/s"
    int_segments(root, [(0, 10), (10, 10), (20, 10)], config=EVENT_TIME)
    objects = MemoryObjects(bucket, "s")
    for info in objects.list("segments/p-0/"):
        if info.key.endswith("00000000000000000002.arrow"):
            objects.delete(info.key)
    _, ks = _planned(root, fail_on_data_loss=False)  # type: ignore[arg-type]
    assert ks == [*range(10), *range(20, 30)]
    assert [s["seq"] for s in lost_report(root, None)["segments"]] == [2]
    assert [o.key for o in objects.list("readers/")]
    assert not any(tmp_path.rglob("*.lost.jsonl"))
