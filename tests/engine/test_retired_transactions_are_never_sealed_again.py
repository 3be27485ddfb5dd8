"""A transaction whose segment retention removed is never sealed again, however many
transactions retired with it (ARCHITECTURE.md §6.7 `txns_gone`, §12.6).

A writer seals a staged transaction from its WAL and then deletes its staged object;
when that delete fails the object stays behind. Once retention removed the segment,
the rows are gone for good: no later observer pass may publish the leftover staged
object again, even when the segment held more transactions than the MANIFEST keeps
ids of retired transactions.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.manifest import TXNS_GONE_KEEP
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


def test_a_leftover_staged_object_is_never_sealed_after_its_segment_retired_with_many_others(
    tmp_path: Path,
) -> None:
    cfg = StoreConfig(
        wal=WalConfig(path=str(tmp_path / "wal-a"), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
        retention=RetentionConfig(max_age_hours=1.0),
    )
    ident = lease_mod._Identity("host-a", 4001, 1, "node-a")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        w = QuiverStore.open(ROOT, cfg, partition="p-0", background=False)
    x = task(w, 1, 0, 3)
    assert w.commit_txn(APP, 1, [("p-0", x)], rows=3)
    for v in range(2, 2 + TXNS_GONE_KEEP):  # one small transaction per task
        t = w.begin_txn(APP, v)
        w.append(ids(1000 + v, 1), txn_id=t)
        assert w.commit_txn(APP, v, [("p-0", t)], rows=1)
    w.flush()

    def delete_fails(op: str, key: str) -> None:
        if op == "delete" and key.endswith(".txn"):
            raise OSError("503 service unavailable")

    objects = w.objects
    assert isinstance(objects, MemoryObjects)
    objects.faults.before = delete_fails
    assert w.writer is not None
    w.writer.maintain()
    assert w.finalize() is not None
    objects.faults.before = None
    assert staged() == [x]  # left behind by the failed delete
    assert len(rows(w)) == 3 + TXNS_GONE_KEEP

    w.run_retention(now_ns=time.time_ns() + 2 * 3600 * 10**9)  # the segment ages out
    assert rows(w) == []
    w.close()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()  # the lease was released: at once
    assert rows(obs) == []  # retired rows never come back
