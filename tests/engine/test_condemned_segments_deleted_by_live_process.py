"""A condemned segment left by a dead pass is deleted by the next pass of a live process.

A process that dies between the DELETED record and the unlink leaves the segment on
disk; ARCHITECTURE.md §15.1: "the next pass deletes" it, including the next pass of
another long-lived process whose index already follows the DELETED floor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.subscribers import Outcome
from tests.stores import writer_and_two_retention_handles


class Crash(BaseException):
    pass


def test_the_next_pass_of_a_live_process_deletes_a_condemned_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with writer_and_two_retention_handles(tmp_path) as (a, b):
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
