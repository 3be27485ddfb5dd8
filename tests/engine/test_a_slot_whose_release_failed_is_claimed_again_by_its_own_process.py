"""A worker whose slot lease could not be released (the release met a transient
failure, logged ``quiver.lease.release_failed``) claims that slot again at its next
claim, as a writer's open takes a lease this process dropped (ARCHITECTURE.md §8.2,
Acquire), instead of skipping it for a ttl and minting a new slot number; a slot this
process still holds under a live lease stays skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control.lease import stored_epoch
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.spark import slots
from tests.engine.test_slot_claims_on_object_roots import URL, config


@pytest.fixture(autouse=True)
def fresh(fresh_memory: None) -> Iterator[None]:
    yield
    slots.close_all()


def claim(wal: Path) -> QuiverStore:
    return QuiverStore.open_slot(URL, config(wal), host="h", background=False)


def test_a_slot_whose_release_failed_is_claimed_again_by_its_own_process_at_once(
    tmp_path: Path,
) -> None:
    first = claim(tmp_path / "wal")
    assert first.writer is not None and first.writer.pid == "w-0"
    objects = first.objects
    assert isinstance(objects, MemoryObjects)

    def fail_release(op: str, key: str) -> None:
        if key == "partitions/w-0/LEASE" and op == "replace":
            raise OSError("503 SlowDown")

    objects.faults.before = fail_release
    first.close()  # the release fails (logged): the lease stays as last renewed
    objects.faults.before = None
    assert stored_epoch(objects, "partitions/w-0/LEASE") == 1

    again = claim(tmp_path / "wal")
    try:
        assert again.writer is not None
        assert again.writer.pid == "w-0", "the process skipped the lease it dropped"
        assert stored_epoch(objects, "partitions/w-0/LEASE") == 2
        # a slot this process holds under a live lease is skipped, as any held slot
        other = claim(tmp_path / "wal-other")
        try:
            assert other.writer is not None and other.writer.pid == "w-1"
        finally:
            other.close()
    finally:
        again.close()
