"""A machine that comes back with a new disk does not hold back the committed rows it
lost (ARCHITECTURE.md §12.6).

A committed transaction staged by a machine that was then lost (with its WAL) must
become readable once its writer lease is free plus the next observer pass. When the
machine reboots with an empty `wal.path` and its writer takes the partition's lease
again (the same slot), that writer's WAL no longer holds the transaction, so it must
not keep the rows unreadable for as long as it holds the lease: they are readable at
the latest once the new writer has sealed its own later rows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest

import quiver_spark.store as store_mod
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.errors import LeaseHeldError
from quiver_spark.objects.memory import MemoryObjects, reset_memory
from quiver_spark.staging import staged_ids

ROOT = "memory://lost2/s"
APP = "query-1"


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    reset_memory()
    lease_mod._seen.clear()
    yield
    reset_memory()
    lease_mod._seen.clear()


class Clock:
    """The observer's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def config(wal: Path) -> StoreConfig:
    return StoreConfig(
        wal=WalConfig(path=str(wal), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
    )


def machine(tmp_path: Path, name: str, pid: int = 4001, node: str = "") -> QuiverStore:
    """A writer of partition p-0 on machine ``name`` (its own host, its own WAL disk)."""
    ident = lease_mod._Identity(f"host-{name}", pid, 1, node or f"node-{name}")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        return QuiverStore.open(
            ROOT, config(tmp_path / f"wal-{name}"), partition="p-0", background=False
        )


def observer(tmp_path: Path, clock: Clock | None = None) -> QuiverStore:
    """The driver, which writes no partition."""
    obs = QuiverStore.open(ROOT, config(tmp_path / "wal-driver"), partition=None)
    if clock is not None:
        obs.lease_clock = clock
    return obs


def ids(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), pa.int64())})


def task(store: QuiverStore, version: int, lo: int, n: int) -> int:
    """A Spark write task: its rows as one transaction, durable, staged."""
    txn = store.begin_txn(APP, version)
    store.append(ids(lo, n), txn_id=txn)
    store.flush()
    assert store.stage_txn(txn) > 0
    return txn


def lose(store: QuiverStore, wal: Path | None) -> None:
    """The machine is gone: its lease is no longer renewed, its process is dead and
    (``wal``) its disk lost. The handle is abandoned, never closed."""
    assert store.writer is not None and store.writer.lease is not None
    keeper = store.writer.lease.keeper
    assert keeper is not None
    keeper.stop()
    store.writer._flock.release()
    if wal is not None:
        shutil.rmtree(wal)


def rows(store: QuiverStore) -> list[int]:
    return sorted(x for b in store.scan() for x in b.column("id").to_pylist())


def staged() -> list[int]:
    return staged_ids(MemoryObjects("lost2", "s"), "p-0")


def test_committed_rows_lost_with_a_disk_are_readable_while_the_rebooted_machine_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "WRITER_LEASE_TTL_S", 0.5)
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, tmp_path / "wal-a")  # disk gone

    # the machine reboots (new boot id, new pid, empty wal.path) and claims its slot
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    time.sleep(0.6)  # the old lease seen unchanged for its ttl
    back = machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    assert back.writer is not None
    assert staged() == [t1]

    obs = observer(tmp_path)
    t2 = task(back, 2, 10, 2)
    assert back.commit_txn(APP, 2, [("p-0", t2)], rows=2)
    back.writer.maintain()
    assert back.finalize() is not None  # its own later rows are sealed and readable
    for _ in range(2):  # the driver's passes, a lease ttl apart
        obs.finalize_idle_partitions()
        time.sleep(0.6)
    assert rows(obs) == [0, 1, 2, 10, 11]
    back.close()
