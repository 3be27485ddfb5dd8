"""Machines of an object root that are lost, and the observer that seals for them
(ARCHITECTURE.md §10.2): a machine is a writer of partition ``p-0`` with its own host
identity and its own ``wal.path``; the observer is the driver, which writes no
partition and watches the writer leases on a clock the test moves.

Test modules using these ask for the ``fresh_memory`` fixture of ``tests/conftest.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.staging import staged_ids
from tests.stores import id_batch, wal_in

ROOT = "memory://lost/s"
APP = "query-1"


class Clock:
    """The observer's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def machine(
    tmp_path: Path, name: str, pid: int = 4001, node: str = "", **sections: Any
) -> QuiverStore:
    """A writer of partition p-0 on machine ``name`` (its own host, its own WAL disk
    ``tmp_path / "wal-<name>"``). ``sections`` sets the config's others (``retention=...``)."""
    ident = lease_mod._Identity(f"host-{name}", pid, 1, node or f"node-{name}")
    with mock.patch.object(lease_mod, "_me", lambda: ident):
        return QuiverStore.open(
            ROOT, wal_in(tmp_path / f"wal-{name}", **sections), partition="p-0", background=False
        )


def observer(tmp_path: Path, clock: Clock | None = None) -> QuiverStore:
    """The driver (a long-lived process of this host), which writes no partition."""
    obs = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-driver"), partition=None)
    if clock is not None:
        obs.lease_clock = clock
    return obs


def task(store: QuiverStore, version: int, lo: int, n: int) -> int:
    """What a Spark write task does: its rows ``lo .. lo + n - 1`` as one transaction of
    batch ``version``, durable, staged."""
    txn = store.begin_txn(APP, version)
    store.append(id_batch(lo, n), txn_id=txn)
    store.flush()
    assert store.stage_txn(txn) > 0
    return txn


def lose(store: QuiverStore, wal: Path | None, *, process_dies: bool = True) -> None:
    """The machine is gone: its lease is no longer renewed and (``wal``) its disk lost.
    The handle is abandoned, never closed; unless it is only paused, its process is
    dead (the kernel dropped its local lock)."""
    assert store.writer is not None and store.writer.lease is not None
    keeper = store.writer.lease.keeper
    assert keeper is not None
    keeper.stop()
    if process_dies:
        store.writer._flock.release()
    if wal is not None:
        shutil.rmtree(wal)


def dies_at_its_manifest_step(store: QuiverStore) -> None:
    """The machine resolves its committed transactions into its open segment and dies
    sealing it: the ``.arrow``, its STATE (the commit point) and the ``.meta`` are
    written, the manifest step is not."""
    assert store.writer is not None
    store.writer.maintain()

    def die_at_manifest(op: str, key: str) -> None:
        if key.endswith("MANIFEST") and op in ("replace", "create"):
            raise OSError("the machine is gone")

    objects = store.objects
    assert isinstance(objects, MemoryObjects)
    objects.faults.before = die_at_manifest
    with pytest.raises(OSError, match="gone"):
        store.finalize()
    objects.faults.before = None


def staged() -> list[int]:
    """The transactions of p-0 staged in the bucket."""
    return staged_ids(MemoryObjects("lost", "s"), "p-0")


def seal_after_expiry(obs: QuiverStore, clock: Clock) -> list[tuple[str, int]]:
    """Two observer passes a lease ttl apart (the driver commits every trigger)."""
    assert obs.finalize_idle_partitions() == []  # the lease is seen for the first time
    clock.t += lease_mod.DEFAULT_TTL_S
    return obs.finalize_idle_partitions()
