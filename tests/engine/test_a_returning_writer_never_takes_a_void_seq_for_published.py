"""A machine that returns after a successor's seal was interrupted loses no committed
row (ARCHITECTURE.md §12.4, §12.6).

A writer that died between its `.meta` and its manifest step leaves a segment its
STATE names as `publishing`. A successor sealing the machine's committed staged
transaction finds that `.meta`, records the seq void and moves to the next seq; if
it is stopped there (a failed request, or it dies) and the machine returns before the
next observer pass, the returning writer's recovery must not take its segment for
published: its rows (and the staged object still holding them) must stay reachable,
and the partition must end up holding every committed row exactly once.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control import lease as lease_mod
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


def test_a_writer_returning_after_a_seal_stopped_past_its_void_step_keeps_its_committed_rows(
    tmp_path: Path,
) -> None:
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert lost.writer is not None
    lost.writer.maintain()  # resolved into the open segment

    def die_at_manifest(op: str, key: str) -> None:
        if key.endswith("MANIFEST") and op in ("replace", "create"):
            raise OSError("the machine is gone")

    lost_objects = lost.objects
    assert isinstance(lost_objects, MemoryObjects)
    lost_objects.faults.before = die_at_manifest
    with pytest.raises(OSError, match="gone"):
        lost.finalize()  # .arrow, STATE (its commit point), .meta of seq 1; no manifest step
    lost_objects.faults.before = None
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)

    def unavailable(op: str, key: str) -> None:
        if op == "create" and key.endswith("00000000000000000002.arrow"):
            raise OSError("503 service unavailable")

    obs_objects = obs.objects
    assert isinstance(obs_objects, MemoryObjects)
    obs_objects.faults.before = unavailable
    assert obs.finalize_idle_partitions() == []  # the lease is seen for the first time
    clock.t += lease_mod.DEFAULT_TTL_S
    assert obs.finalize_idle_partitions() == []  # seq 1 made void, then seq 2 failed
    assert "p-0" in obs.idle_failures
    obs_objects.faults.before = None

    back = machine(tmp_path, "a")  # returns with its WAL before the next pass
    back.close()
    obs.finalize_idle_partitions()
    assert rows(obs) == [0, 1, 2]
