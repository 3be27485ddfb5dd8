"""A damaged MANIFEST never brings back, through the ``.meta`` a late sealer made,
rows retention deleted.

An observer sealing a lost machine's committed transaction (ARCHITECTURE.md §10.2) is
paused before it makes the segment's ``.meta``; meanwhile the partition's writer
comes back on another machine, takes the lease over, seals the transaction itself,
and once every subscriber acknowledged that segment retention deletes it. Then the
observer's ``.meta`` lands and its MANIFEST change is refused: its objects are an
orphan. When the MANIFEST is damaged, readers decide the partition by its files
(§11.1): the orphan must not be taken for a published segment, or rows retention
deleted are read again (a writer looks at its MANIFEST before it makes a ``.meta``,
§11.3; a sealer's late ``.meta`` must leave nothing a listing would take either).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.clock import elapsed
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.lost_machines import ROOT, Clock, lose, machine, observer, task
from tests.stores import scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def scanned(tmp_path: Path, name: str) -> list[int]:
    with QuiverStore.open(
        ROOT, wal_in(tmp_path / name), partition=None, create=False, background=False
    ) as store:
        return scanned_ids(store)


def test_a_damaged_manifest_never_brings_back_deleted_rows_through_a_late_sealers_meta(
    tmp_path: Path,
):
    lost = machine(tmp_path, "a")
    txn = task(lost, 1, 0, 3)
    assert lost.commit_txn("query-1", 1, [("p-0", txn)], rows=3)
    lose(lost, tmp_path / "wal-a")
    clock = Clock()
    obs = observer(tmp_path, clock)
    obs.subscribers.register("s")
    assert obs.finalize_idle_partitions() == []  # the lease is seen for the first time
    clock.t += lease_mod.DEFAULT_TTL_S

    def writer_comes_back() -> None:
        """While the observer is paused before its .meta: the partition's writer, on
        a machine that watched the observer's lease for its ttl, seals the
        transaction; the subscriber acknowledges it; retention deletes it."""
        key = "partitions/p-0/LEASE"
        got = MemoryObjects("lost", "s").get(key)
        assert got is not None
        lease_mod._seen[(ROOT, key)] = lease_mod._Seen(
            got.version, elapsed() - 10 * lease_mod.DEFAULT_TTL_S, elapsed
        )
        back = machine(tmp_path, "b", pid=4002)
        assert back.writer is not None
        back.writer.maintain()
        back.close()
        with QuiverStore.open(
            ROOT, wal_in(tmp_path / "wal-gc"), partition=None, background=False
        ) as gc:
            [seq] = [m.seq for m in gc.segments("p-0")]
            gc.subscribers.record("s", "p-0", [seq], Outcome.ACK)
            assert gc.run_retention().deleted == {"p-0": [seq]}

    paused: list[str] = []

    def pause_before_meta(op: str, key: str) -> None:
        if op == "create" and key.endswith(".meta") and not paused:
            paused.append(key)
            writer_comes_back()

    obs.objects.faults.before = pause_before_meta
    obs.finalize_idle_partitions()  # its MANIFEST change is refused: fenced
    obs.objects.faults.before = None
    obs.close()
    assert paused
    assert scanned(tmp_path, "wal-r1") == []

    objects = MemoryObjects("lost", "s")
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    assert scanned(tmp_path, "wal-r2") == []  # decided by the files
