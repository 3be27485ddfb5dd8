"""On an object root a core slot ``<host>-<k>`` is claimed by the writer lease
``partitions/<host>-<k>/LEASE``, handed to the partition writer that opens it.

A slot whose lease another writer holds is skipped for the next one; a claimed lease is
renewed in the background and parked for the writer to adopt; a slot whose partition
cannot be opened gives its lease back at once, and so does an evicted or closed slot
whose writer never adopted it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from quiver_spark.config import StoreConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import Lease, adopt
from quiver_spark.errors import CorruptionError, LockedError
from quiver_spark.objects.memory import MemoryObjects, reset_memory
from quiver_spark.spark import slots

HOST = slots.host_tag()


@dataclass
class FakeWriter:
    pid: str


@dataclass
class FakeStore:
    """What ``slot_store`` needs of an open store; adopts its slot's lease as the
    partition writer of an object root does."""

    root: str
    writer: FakeWriter
    lease: Lease | None
    recovery: None = None
    closed: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.closed.append(self.writer.pid)
        if self.lease is not None:
            self.lease.release()


@pytest.fixture
def objects(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryObjects]:
    reset_memory()
    slots.close_all()
    store = MemoryObjects("bucket", "root")
    yield store
    slots.close_all()
    reset_memory()


def fake_open(
    objects: MemoryObjects, *, adopts: bool = True, damaged: set[str] | None = None
) -> object:
    def open_(root: str, config: StoreConfig, partition: str) -> FakeStore:
        if damaged and partition in damaged:
            raise CorruptionError(f"{root}/{partition}/STATE", 0, "frame crc mismatch")
        key = f"partitions/{partition}/LEASE"
        return FakeStore(root, FakeWriter(partition), adopt(objects, key) if adopts else None)

    return open_


def body(objects: MemoryObjects, partition: str) -> lease_mod._Body:
    got = objects.get(f"partitions/{partition}/LEASE")
    assert got is not None
    return lease_mod._decode(partition, got.data)


def test_a_slot_held_by_another_writer_is_refused_and_the_next_one_is_free(
    objects: MemoryObjects,
) -> None:
    first = slots.claim_slot_lease(objects, HOST, 0)
    with pytest.raises(LockedError, match=f"partitions/{HOST}-0/LEASE"):
        slots.claim_slot_lease(objects, HOST, 0)
    second = slots.claim_slot_lease(objects, HOST, 1)
    assert first.keeper is not None and second.keeper is not None  # renewed in background
    first.release()
    second.release()


def test_each_store_config_claims_the_first_free_slot_and_its_writer_adopts_the_lease(
    objects: MemoryObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots.QuiverStore, "open", fake_open(objects))
    a = slots.slot_store("memory://bucket/root", StoreConfig(), objects)
    b = slots.slot_store("memory://bucket/root", StoreConfig(salvage=True), objects)
    assert slots.slot_store("memory://bucket/root", StoreConfig(), objects) is a
    assert (a.writer.pid, b.writer.pid) == (f"{HOST}-0", f"{HOST}-1")
    assert isinstance(a, FakeStore) and isinstance(b, FakeStore)
    assert a.lease is not None and a.lease.epoch == 1 and a.lease.keeper is not None
    assert body(objects, f"{HOST}-0").holder.purpose == "writer"
    slots.close_all()
    assert body(objects, f"{HOST}-0").released and body(objects, f"{HOST}-1").released


def test_a_slot_that_cannot_be_opened_gives_its_lease_back_and_the_next_is_used(
    objects: MemoryObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots.QuiverStore, "open", fake_open(objects, damaged={f"{HOST}-0"}))
    store = slots.slot_store("memory://bucket/root", StoreConfig(), objects)
    assert store.writer is not None and store.writer.pid == f"{HOST}-1"
    assert body(objects, f"{HOST}-0").released
    assert not body(objects, f"{HOST}-1").released


def test_a_slot_lease_no_writer_adopted_is_released_when_the_slot_is_evicted(
    objects: MemoryObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots.QuiverStore, "open", fake_open(objects, adopts=False))
    store = slots.slot_store("memory://bucket/root", StoreConfig(), objects)
    assert isinstance(store, FakeStore) and store.lease is None
    assert not body(objects, f"{HOST}-0").released
    slots.evict("memory://bucket/root", StoreConfig(), OSError("boom"))
    assert store.closed == [f"{HOST}-0"]
    assert body(objects, f"{HOST}-0").released
