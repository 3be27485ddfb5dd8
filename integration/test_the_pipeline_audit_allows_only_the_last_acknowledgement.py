"""The pipeline audit's allowance (``integration/scenario.py``): before its own
retention pass it tolerates, of the segments both subscribers acknowledged, only those
of each subscriber's last acknowledgement, read from the query's checkpoint: what its
last committed batch's end includes and the batch before's does not, backlogs of a
newest-first query included. An offset it cannot read fails the audit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from integration.scenario import last_acknowledged
from quiver_spark.errors import OffsetFormatError
from quiver_spark.spark.offsets import QuiverOffset
from quiver_spark.subscription.position import Position


def _checkpoint(root: Path, ends: list[Position], *, planned: Position | None = None) -> Path:
    """A source query's checkpoint: one committed batch per end (and a planned one)."""
    (root / "commits").mkdir(parents=True)
    (root / "offsets").mkdir()
    for i, end in enumerate([*ends, *([planned] if planned is not None else [])]):
        offset = json.dumps(QuiverOffset(end, "store-id").to_json())
        (root / "offsets" / str(i)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offset}\n')
        if i < len(ends):
            (root / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return root


@pytest.mark.parametrize(
    ("ends", "planned", "expected"),
    [
        ([Position({"w-0": 10, "w-1": 9}), Position({"w-0": 11, "w-1": 10})], None,
         {("w-0", 11), ("w-1", 10)}),
        ([Position({"w-0": 3}), Position({"w-0": 5, "w-1": 2})], Position({"w-0": 9}),
         {("w-0", 4), ("w-0", 5), ("w-1", 1), ("w-1", 2)}),
        ([Position({"p": 10}, backlog={"p": (3, 8)}), Position({"p": 10})], None,
         {("p", q) for q in range(3, 9)}),
        ([Position({"p": 2}), Position({"p": 10}, backlog={"p": (3, 8)})], None,
         {("p", 9), ("p", 10)}),
        ([Position({"p": 4})], None, {("p", q) for q in range(1, 5)}),
        ([], Position({"p": 4}), set()),
    ],
    ids=["oldest first", "a new partition and a planned batch", "a backlog drained",
         "the head served first", "one batch", "nothing committed"],
)  # fmt: skip
def test_the_allowance_is_what_the_last_committed_batch_acknowledged(
    tmp_path: Path, ends: list[Position], planned: Position | None, expected: set
) -> None:
    assert last_acknowledged([_checkpoint(tmp_path / "q", ends, planned=planned)]) == expected


def test_the_allowance_is_the_union_over_the_subscribers(tmp_path: Path) -> None:
    fast = _checkpoint(tmp_path / "fast", [Position({"p": 4}), Position({"p": 6})])
    slow = _checkpoint(tmp_path / "slow", [Position({"p": 2}), Position({"p": 3})])
    assert last_acknowledged([fast, slow, tmp_path / "never-started"]) == {
        ("p", 3),
        ("p", 5),
        ("p", 6),
    }


def test_an_offset_without_its_store_fails_the_audit(tmp_path: Path) -> None:
    q = _checkpoint(tmp_path / "q", [Position({"p": 4})])
    (q / "offsets" / "0").write_text('v1\n{}\n{"v": 2, "segments": {"p": 4}}\n')
    with pytest.raises(OffsetFormatError):
        last_acknowledged([q])
