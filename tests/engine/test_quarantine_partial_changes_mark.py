"""A quarantine that fails after unpublishing its segment still changes the mark.

Once a `.meta` is moved aside the segment is unpublished; the quarantine mark changes
even when moving the `.arrow` then fails, so consumers list and step over the hole.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.fs import FileIO
from quiver_spark.segment import SegmentLocation
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import int_segments


class ArrowMoveFails(FileIO):
    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if op == "rename" and "/quarantine/" in path and path.endswith(".arrow"):
            raise OSError("injected: moving the .arrow aside failed")


def test_a_partial_quarantine_still_changes_the_mark(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)], partition="p-0")
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(sub.start())
        assert first == Position({"p-0": 2})
        int_segments(tmp_path, [(2, 1), (3, 1), (4, 1)], partition="p-0")  # seqs 3, 4, 5
        other = SegmentLocation(str(tmp_path / "segments"), io=ArrowMoveFails())
        before = other.quarantine_mark()
        with pytest.raises(OSError):
            other.quarantine("p-0", 3, "test: damaged")
        assert not other.is_published("p-0", 3)  # the .meta was moved: unpublished
        # the consumer's next trigger must see past the hole (seqs 4, 5 are published)
        end = sub.next_batch_end(first)
        assert end == Position({"p-0": 5}), end
        assert other.quarantine_mark() != before, "the segment is unpublished but no mark changed"
