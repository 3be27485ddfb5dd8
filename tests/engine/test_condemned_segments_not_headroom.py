"""A condemned segment is deleted by the next pass, headroom or not.

A pass that dies after recording a segment DELETED but before any unlink leaves it on
disk; with `steady_state_headroom` > 0 the next pass still deletes it rather than
keeping it as headroom.
"""

from __future__ import annotations

from pathlib import Path

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig
from quiver_spark.retained import RetainedIndex
from tests.stores import publish

CFG = StoreConfig(
    segment=SegmentConfig(max_open_duration_s=3600),
    retention=RetentionConfig(steady_state_headroom_bytes=1 << 30),
)


def test_a_condemned_segment_is_deleted_by_the_next_pass_despite_headroom(
    tmp_path: Path
) -> None:
    root = str(tmp_path)
    with (
        QuiverStore.open(root, CFG, partition="p-0", background=False) as w,
        QuiverStore.open(root, CFG, partition=None, background=False) as a,
        QuiverStore.open(root, CFG, partition=None, background=False) as b,
    ):
        a._retained = RetainedIndex(clock=lambda: 0.0)
        a.subscribers.register("s")
        publish(w, 3)
        assert a.run_retention().deleted == {}

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
