"""An incremental sync never re-adds segments another process deleted.

Metadata cached by a consumer's probing is not proof a segment still exists: seqs the
ack log records DELETED stay out of the long-lived index (no phantom bytes counted by
the size cap or status).
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.retained import RetainedIndex
from tests.stores import int_segments


def test_an_incremental_sync_does_not_resurrect_deleted_segments(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)], partition="p-0")  # seqs 1..3
    with QuiverStore.open(str(tmp_path), partition=None, create=False) as mine:
        loc, reg = mine.segment_location, mine.subscribers
        index = RetainedIndex()
        reg.refresh()
        index.sync(loc, reg)  # first sync: a full survey
        assert [s.seq for s in index.segments("p-0")] == [1, 2, 3]
        int_segments(tmp_path, [(3, 1), (4, 1)], partition="p-0")  # seqs 4, 5
        found = loc.probe_next({"p-0": 4})  # this process's consumer planning
        assert [f.seq for f in found["p-0"]] == [4, 5]
        with QuiverStore.open(str(tmp_path), partition=None, create=False) as other:
            with other.subscribers.exclusive() as oreg:  # another process's pass
                oreg.condemn({"p-0": [4, 5]})
            other.segment_location.delete("p-0", [4, 5])
        assert loc.published_seqs("p-0") == [1, 2, 3]
        reg.refresh()
        index.sync(loc, reg)  # incremental
        assert not index.surveyed
        assert [s.seq for s in index.segments("p-0")] == [1, 2, 3], "deleted seqs came back"
