"""A POSIX root seen through a counting wrapper is a POSIX root everywhere: its ack
log is the files under ``subscribers/`` (§8) and its live-consumer lock is the flock
on ``readers/<subscriber>.lock``, never a lease object (§12.3). The two decisions
never disagree about the same store."""

from __future__ import annotations

from pathlib import Path

from quiver_spark.objects import CountingObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.subscribers import SubscriberRegistry, live
from quiver_spark.subscribers.journal import FileJournal


class Consumer:
    pass


def test_a_counted_posix_root_takes_the_flock_for_its_live_consumer_and_no_lease(
    tmp_path: Path,
) -> None:
    counted = CountingObjects(LocalObjects(str(tmp_path)))
    owner = Consumer()
    live.claim_live(str(tmp_path), "fwd", owner, counted)
    try:
        assert (tmp_path / "readers" / "fwd.lock").exists()
        assert not (tmp_path / "readers" / "fwd.lease").exists()
        assert live.is_live(str(tmp_path), "fwd", counted)
    finally:
        live.release_live(str(tmp_path), "fwd", owner, counted)


def test_the_ack_log_and_the_live_lock_of_a_counted_posix_root_are_both_posix(
    tmp_path: Path,
) -> None:
    counted = CountingObjects(LocalObjects(str(tmp_path)))
    reg = SubscriberRegistry.open(str(tmp_path), objects=counted)
    try:
        assert isinstance(reg.journal, FileJournal)
        assert live.uses_lease(counted) is False
    finally:
        reg.close()
