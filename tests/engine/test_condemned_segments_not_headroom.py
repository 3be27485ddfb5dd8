"""A condemned segment is deleted by the next pass, headroom or not.

A pass that dies after recording a segment DELETED but before any unlink leaves it on
disk; with `steady_state_headroom` > 0 the next pass still deletes it rather than
keeping it as headroom.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark import RetentionConfig, SegmentConfig, StoreConfig
from tests.stores import writer_and_two_retention_handles

CFG = StoreConfig(
    segment=SegmentConfig(max_open_duration_s=3600),
    retention=RetentionConfig(steady_state_headroom_bytes=1 << 30),
)


def test_a_condemned_segment_is_deleted_by_the_next_pass_despite_headroom(tmp_path: Path) -> None:
    with writer_and_two_retention_handles(tmp_path, CFG) as (a, b):
        # b's pass condemned seq 1 (chosen by time / drop_oldest: s gets `dropped`) and
        # died before unlinking anything: the records without the deletion
        with b.subscribers.exclusive() as reg:
            reg.condemn({"p-0": [1]})
        assert b.subscribers.is_deleted("p-0", 1)
        assert a.segment_location.published_seqs("p-0") == [1, 2, 3]

        a.run_retention()
        assert a.segment_location.published_seqs("p-0") == [2, 3], (
            "a condemned segment stays on disk, kept as headroom"
        )
