"""A condemned segment left by a dead pass is deleted by the next pass of a live process.

A process that dies between the DELETED record and the unlink leaves the segment on
disk; ARCHITECTURE.md §8.7: "the next pass deletes" it, including the next pass of
another long-lived process whose index already follows the DELETED floor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.retained import RetainedIndex
from quiver_spark.subscribers import Outcome
from tests.stores import HAND_SEALED, publish

CFG = HAND_SEALED


class Crash(BaseException):
    pass



def test_the_next_pass_of_a_live_process_deletes_a_condemned_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    with (
        QuiverStore.open(root, CFG, partition="p-0", background=False) as w,
        QuiverStore.open(root, CFG, partition=None, background=False) as a,
        QuiverStore.open(root, CFG, partition=None, background=False) as b,
    ):
        a._retained = RetainedIndex(clock=lambda: 0.0)  # no periodic resurvey in the test
        a.subscribers.register("s")
        publish(w, 3)
        assert a.run_retention().deleted == {}  # a's first pass surveys: sees 1, 2, 3
        a.subscribers.record("s", "p-0", [1], Outcome.ACK)

        def crash(*_args: object, **_kw: object) -> None:
            raise Crash("process b dies after condemn, before the unlink")

        monkeypatch.setattr(b.segment_location, "delete", crash)
        with pytest.raises(Crash):
            b.run_retention()
        assert b.subscribers.is_deleted("p-0", 1)
        assert a.segment_location.published_seqs("p-0") == [1, 2, 3]  # left on disk

        result = a.run_retention()  # the next pass (b is gone)
        assert result.deleted == {"p-0": [1]}, "the condemned segment was not deleted"
        assert a.segment_location.published_seqs("p-0") == [2, 3]
