"""Two retention passes that chose the same segment: the one that finds it already
deleted by the other says so at DEBUG, not as a warning that reads like data loss.

On an object root nothing locks the ack log between processes (ARCHITECTURE.md
§13.7): a writer's pass and a consumer's pass may both choose a segment every
subscriber is done with; the first records it DELETED and removes it, the second
finds it gone when it checks its plan (``quiver.segment.vanished``). Nothing is
lost, and the ack log says so. A segment gone that no pass recorded deleted (removed
by hand) is still a warning, and the subscriber that needed it still meets it as data
loss.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import RetentionConfig, SegmentConfig, StoreConfig
from quiver_spark.errors import DataLossError
from quiver_spark.subscribers import Outcome
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import wal_in, writer_and_two_retention_handles

HOUR_NS = 3_600_000_000_000


def vanished(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("quiver.segment.vanished")]


@pytest.mark.usefixtures("fresh_memory")
def test_a_segment_the_other_pass_deleted_first_is_logged_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="quiver_spark")
    with writer_and_two_retention_handles("memory://bkt/s", wal_in(tmp_path / "wal")) as (a, b):
        a.subscribers.record("s", "p-0", [1], Outcome.ACK)
        check = a.segment_location.check_before_delete
        other: dict[str, Any] = {}

        def b_passes_first(deletions: Mapping[str, Iterable[int]], **kw: Any) -> Any:
            if not other:  # b's pass runs between a's plan and a's check
                other["result"] = b.run_retention()
            return check(deletions, **kw)

        a.segment_location.check_before_delete = b_passes_first  # type: ignore[method-assign]
        result = a.run_retention()

        assert other["result"].deleted == {"p-0": [1]}
        assert result.deleted == {}
        assert a.segment_location.published_seqs("p-0") == [2, 3]
    seen = vanished(caplog)
    assert seen, "the race did not happen: a's check never found the segment gone"
    assert [r.levelname for r in seen] == ["DEBUG"], [(r.levelname, r.getMessage()) for r in seen]


def test_a_segment_removed_by_hand_that_a_subscriber_needed_stays_a_warning_and_is_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="quiver_spark")
    cfg = StoreConfig(
        segment=SegmentConfig(max_open_duration_s=3600),
        retention=RetentionConfig(max_age_hours=1),
    )
    with writer_and_two_retention_handles(tmp_path, cfg) as (a, _b):
        for name in ("00000000000000000001.meta", "00000000000000000001.arrow"):
            (tmp_path / "segments" / "p-0" / name).unlink()  # by hand: s never read it
        a.run_retention(now_ns=a._retention.clock.now_ns() + 2 * HOUR_NS)
    seen = vanished(caplog)
    assert [r.levelname for r in seen] == ["WARNING"], [(r.levelname, r.getMessage()) for r in seen]
    assert "seqs=[1]" in seen[0].getMessage()
    with Subscription.open(str(tmp_path), "s") as sub:
        start = sub.start()
        with pytest.raises(DataLossError, match="segment 1 of partition p-0"):
            sub.segments(start, Position({"p-0": 3}))
