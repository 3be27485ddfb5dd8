"""On an object root a writer's successor fences first and never removes an object it
did not publish (ARCHITECTURE.md §11.3, the fencing table of §16.2): a paused holder's
upload in flight is passed over, never deleted, so its late requests can neither
publish over a hole nor lose the rows of a committed transaction.
"""

from __future__ import annotations

import time
from pathlib import Path
from unittest import mock

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LeaseHeldError, LeaseLostError
from quiver_spark.layout import manifest as manifest_key
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from tests.lost_machines import APP, ROOT, lose, machine, task
from tests.stores import acked_ids, scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _bucket() -> MemoryObjects:
    """The root's bucket (a new handle: ``fresh_memory`` starts each test empty)."""
    return MemoryObjects("lost", "s")


def _successor(tmp_path: Path, name: str = "b") -> QuiverStore:
    """Another machine of the slot takes the lease over: seen unrenewed for its ttl."""
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, name)
    time.sleep(0.4)
    return machine(tmp_path, name)


def _seal(store: QuiverStore) -> None:
    """The writer resolves its committed transactions and seals its open segment."""
    assert store.writer is not None
    store.writer.maintain()
    store.finalize()


def _arrow(seq: int) -> str:
    return f"segments/p-0/{seq:020d}.arrow"


def test_a_successor_never_removes_an_upload_it_did_not_publish_and_starts_above_it(
    tmp_path: Path,
) -> None:
    first = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(first, 1, 0, 3)
    assert first.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    _seal(first)
    # a paused holder's upload of the next seq, its .meta and manifest step not made yet
    _bucket().create(_arrow(2), b"a paused holder's bytes")
    lose(first, tmp_path / "wal-a", process_dies=False)
    successor = _successor(tmp_path)
    assert _bucket().get(_arrow(2)) is not None  # not removed: it may be a holder's in flight
    t2 = task(successor, 2, 3, 2)
    assert successor.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    _seal(successor)
    m = successor.manifests.read("p-0")
    assert m is not None and m.seqs() == [1, 3]  # seq 2 passed over: recorded void
    assert m.deleted(2)
    assert scanned_ids(successor) == [0, 1, 2, 3, 4]


def test_the_successors_manifest_write_comes_before_its_first_listing(tmp_path: Path) -> None:
    first = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(first, 1, 0, 3)
    assert first.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    _seal(first)
    lose(first, tmp_path / "wal-a", process_dies=False)
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    time.sleep(0.4)
    order: list[str] = []

    def note(op: str, key: str) -> None:
        if key == manifest_key("p-0") and op in ("replace", "create"):
            order.append("manifest")
        elif op == "list" and key.startswith("segments/p-0"):
            order.append("list")
        elif op == "delete":
            order.append(f"delete {key}")

    real = MemoryObjects._before

    def before(self: MemoryObjects, op: str, key: str) -> None:
        note(op, key)
        real(self, op, key)

    with mock.patch.object(MemoryObjects, "_before", before):
        machine(tmp_path, "b")
    assert order and order[0] == "manifest", order
    assert not [o for o in order if o.startswith("delete")], order


def test_a_paused_writer_meeting_its_successors_upload_is_fenced_and_removes_nothing(
    tmp_path: Path,
) -> None:
    zombie = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None
    zombie.writer.maintain()  # its committed rows wait in its open segment
    lose(zombie, None, process_dies=False)  # paused: its lease is no longer renewed
    successor = _successor(tmp_path)  # fences: its epoch is in the MANIFEST
    m = successor.manifests.read("p-0")
    assert m is not None
    in_flight = _arrow(m.high + 1)
    _bucket().create(in_flight, b"the successor's upload, about to be published")
    removed: list[str] = []
    real = MemoryObjects._before

    def before(self: MemoryObjects, op: str, key: str) -> None:
        if op == "delete" and key.endswith(".arrow"):
            removed.append(key)
        real(self, op, key)

    # the zombie resumes just past its own lease check and seals into the same seq
    zombie.writer.sealing.check_lease = lambda: None  # type: ignore[method-assign]
    with mock.patch.object(MemoryObjects, "_before", before), pytest.raises(LeaseLostError):
        zombie.finalize()
    assert removed == []
    got = _bucket().get(in_flight)
    assert got is not None and got.data.startswith(b"the successor's upload")
    _seal(successor)
    assert scanned_ids(successor) == [0, 1, 2]  # the zombie's committed rows, sealed once


def test_a_long_lived_reader_passes_a_void_seq_that_has_no_meta(tmp_path: Path) -> None:
    first = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(first, 1, 0, 3)
    assert first.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    _seal(first)
    reader = Subscription.open(ROOT, "r", config=wal_in(tmp_path / "wal-r"))
    reader.start("earliest")
    assert acked_ids(reader) == [0, 1, 2]
    _bucket().create(_arrow(2), b"a paused holder's bytes")  # never gets a .meta
    lose(first, tmp_path / "wal-a", process_dies=False)
    successor = _successor(tmp_path)
    t2 = task(successor, 2, 3, 2)
    assert successor.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    _seal(successor)
    assert acked_ids(reader) == [3, 4]  # at once: the MANIFEST decides, no probe of seq 2
    reader.close()
