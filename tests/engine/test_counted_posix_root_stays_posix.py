"""A POSIX root seen through a counting wrapper is a POSIX root everywhere: its ack
log is the files under ``subscribers/`` (§13) and its live-consumer lock is the flock
on ``readers/<subscriber>.lock``, never a lease object (§8.2): both are the root
kind's, chosen from the root, never from the objects' type, so the two never disagree
about the same store."""

from __future__ import annotations

from pathlib import Path

from quiver_spark.objects import CountingObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.root_kind import root_kind
from quiver_spark.subscribers import SubscriberRegistry
from quiver_spark.subscribers.journal import FileJournal
from quiver_spark.subscribers.live import FlockLive


class Consumer:
    pass


def test_a_counted_posix_root_takes_the_flock_for_its_live_consumer_and_no_lease(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    locks = root_kind(root).live_locks(root, CountingObjects(LocalObjects(root)))
    owner = Consumer()
    locks.claim("fwd", owner)
    try:
        assert (tmp_path / "readers" / "fwd.lock").exists()
        assert not (tmp_path / "readers" / "fwd.lease").exists()
        assert locks.is_live("fwd")
    finally:
        locks.release("fwd", owner)


def test_the_ack_log_and_the_live_lock_of_a_counted_posix_root_are_both_posix(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    counted = CountingObjects(LocalObjects(root))
    kind = root_kind(root)
    reg = SubscriberRegistry.open(root, objects=counted, journal=kind.journal)
    try:
        assert isinstance(reg.journal, FileJournal)
        assert isinstance(kind.live_locks(root, counted), FlockLive)
    finally:
        reg.close()
