"""On an object root the core slots are a pool of leases every machine shares
(ARCHITECTURE.md §8.2, "Slots"): slot ``k`` is partition ``w-<k>`` whichever host
claims it, and a worker takes the lowest-numbered slot whose writer lease is free
(never taken, released, its holder a dead process of this host, or unwritten for its
ttl by the storage's clock), so a new executor takes over the slot a gone one left
instead of adding a partition. A held slot is skipped, never waited for; a slot taken
over from a silent holder gets a higher epoch, which fences that holder. A POSIX root
keeps ``<host>-<k>``; a store whose object root holds ``<host>-<k>`` partitions of
earlier versions keeps reading them while its new writers take pool slots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import current_holder
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects import memory
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.spark import slots
from tests.stores import id_batch, scanned_ids

URL = "memory://slots/s"
TTL_S = 30.0


@pytest.fixture(autouse=True)
def fresh(fresh_memory: None) -> Iterator[None]:
    yield
    slots.close_all()


def config(wal: Path) -> StoreConfig:
    return StoreConfig(
        wal=WalConfig(path=str(wal), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
        lease_ttl_s=TTL_S,
    )


def elsewhere(tmp_path: Path, name: str) -> QuiverStore:
    """A worker of another machine (its own host, node and WAL disk) that claimed a slot
    and then went silent: paused or gone, its lease no longer renewed."""
    ident = lease_mod._Identity(f"pod-{name}", 4000, 1, f"node-{name}")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        store = QuiverStore.open_slot(
            URL, config(tmp_path / f"wal-{name}"), host=f"pod-{name}", background=False
        )
    assert store.writer is not None and store.writer.lease is not None
    keeper = store.writer.lease.keeper
    assert keeper is not None
    keeper.stop()
    return store


def claim(tmp_path: Path) -> QuiverStore:
    """This process's worker claims a slot (as the sink's first task here does)."""
    return slots.slot_store(URL, config(tmp_path / "wal"))


def pid(store: QuiverStore) -> str:
    assert store.writer is not None
    return store.writer.pid


def lease_key(slot: str) -> str:
    return f"partitions/{slot}/LEASE"


def test_slots_on_an_object_root_are_named_from_the_pool_whatever_the_host(
    tmp_path: Path,
) -> None:
    store = claim(tmp_path)
    assert pid(store) == "w-0"
    assert current_holder(MemoryObjects("slots", "s"), lease_key("w-0")) is not None


def test_a_slot_whose_lease_another_writer_holds_is_skipped(tmp_path: Path) -> None:
    with QuiverStore.open(URL, config(tmp_path / "other"), partition="w-0", background=False):
        store = claim(tmp_path)
        assert pid(store) == "w-1"
        store.append(id_batch(0, 2))
        store.flush()


def test_an_evicted_slot_releases_its_lease_for_the_next_claimant(tmp_path: Path) -> None:
    cfg = config(tmp_path / "wal")
    assert pid(slots.slot_store(URL, cfg)) == "w-0"
    objects = MemoryObjects("slots", "s")
    assert current_holder(objects, lease_key("w-0")) is not None
    slots.evict(URL, cfg)
    assert current_holder(objects, lease_key("w-0")) is None  # released: taken at once
    assert pid(slots.slot_store(URL, cfg)) == "w-0"


def test_a_released_slot_is_taken_by_a_worker_of_another_machine_at_once(
    tmp_path: Path,
) -> None:
    gone = elsewhere(tmp_path, "a")
    assert pid(gone) == "w-0"
    gone.close()  # its worker exited: the lease released
    assert pid(claim(tmp_path)) == "w-0"


def test_a_silent_holders_slot_is_reused_once_its_lease_is_a_ttl_old_by_the_storages_clock(
    tmp_path: Path,
) -> None:
    """A pod that died without releasing its slot: the next pod takes the slot over once
    the storage says its lease went unwritten for the ttl; before that it is held, and
    the claimant takes the next number (a slot whose holder may still be alive is
    never taken)."""
    gone = elsewhere(tmp_path, "a")
    assert pid(gone) == "w-0"
    objects = MemoryObjects("slots", "s")
    before = lease_mod.decode_lease("lease", objects.get(lease_key("w-0")).data).epoch  # type: ignore[union-attr]

    early = QuiverStore.open_slot(URL, config(tmp_path / "early"), host="pod-b", background=False)
    assert pid(early) == "w-1", "a lease renewed less than a ttl ago was taken"
    early.close()

    memory.age_objects(TTL_S + 3)
    store = claim(tmp_path)
    assert pid(store) == "w-0"
    got = objects.get(lease_key("w-0"))
    assert got is not None
    taken = lease_mod.decode_lease("lease", got.data)
    assert taken.epoch > before and not taken.released
    # only one probe of the storage's clock beside the partitions, no partition of it
    assert objects.get("partitions/CLOCK") is not None
    assert store.partitions() == []


def test_a_new_slot_number_is_minted_only_while_every_lower_slot_is_held(
    tmp_path: Path,
) -> None:
    """w-0 held by a live writer, w-1 by a silent one past its ttl, w-2 never taken:
    the claim takes w-1."""
    with QuiverStore.open(
        URL, config(tmp_path / "live"), partition="w-0", background=False
    ) as live:
        silent = elsewhere(tmp_path, "a")
        assert pid(silent) == "w-1"
        memory.age_objects(TTL_S + 3)
        assert live.writer is not None and live.writer.lease is not None
        live.writer.lease.renew()  # w-0's holder is alive: its lease is fresh
        assert pid(claim(tmp_path)) == "w-1"


def test_a_silent_holder_whose_slot_was_taken_over_is_fenced_and_its_rows_are_sealed_once(
    tmp_path: Path,
) -> None:
    """The old holder was only paused: its committed rows (staged) are sealed by the
    slot's new holder, whose WAL on its own machine starts empty, and the old holder's
    later publication is refused (§16.2)."""
    old = elsewhere(tmp_path, "a")
    txn = old.begin_txn("q", 1)
    old.append(id_batch(0, 3), txn_id=txn)
    old.flush()
    old.stage_txn(txn)
    assert old.commit_txn("q", 1, [("w-0", txn)], rows=3)

    memory.age_objects(TTL_S + 3)
    new = claim(tmp_path)
    assert pid(new) == "w-0"
    t2 = new.begin_txn("q", 2)
    assert t2 > txn  # ids above every id the bucket names
    new.append(id_batch(10, 2), txn_id=t2)
    new.flush()
    new.stage_txn(t2)
    assert new.commit_txn("q", 2, [("w-0", t2)], rows=2)
    new.finalize()

    assert old.writer is not None
    old.writer.maintain()
    with pytest.raises(LeaseLostError):
        old.finalize()
    slots.close_all()
    with QuiverStore.open(URL, partition=None, create=False) as reader:
        assert scanned_ids(reader) == [0, 1, 2, 10, 11]
        assert reader.partitions() == ["w-0"]


def test_a_posix_root_keeps_its_hosts_own_slots(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
    host = slots.host_tag()
    with QuiverStore.open(root, cfg, partition=f"{host}-0", background=False):
        store = slots.slot_store(root, cfg)
        assert pid(store) == f"{host}-1"


def test_host_named_partitions_of_an_earlier_version_are_read_beside_the_pools(
    tmp_path: Path,
) -> None:
    with QuiverStore.open(URL, config(tmp_path / "old"), partition="vm-0", background=False) as old:
        old.append(id_batch(0, 2))
        old.flush()
        old.finalize()
    store = claim(tmp_path)
    assert pid(store) == "w-0"
    store.append(pa.record_batch({"id": pa.array([5], pa.int64())}))
    store.flush()
    store.finalize()
    assert sorted(store.partitions()) == ["vm-0", "w-0"]
    assert scanned_ids(store) == [0, 1, 5]
