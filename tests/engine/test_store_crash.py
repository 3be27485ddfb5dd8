"""Crash-state enumeration over the store's append, finalize, commit and truncation.

A workload runs through a recording file layer; for every prefix of its I/O trace
the crash simulator builds each state a crash could leave (kill -9, power loss with
only fsynced data, power loss keeping directory changes, in-order write-back cut
short, a torn last write). Each state is opened with the real recovery and must
hold every acknowledged row exactly once, as a gap-free prefix.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import CrashSimulator, FaultyIO

CFG = StoreConfig(
    wal=WalConfig(flush_interval_s=3600, file_size_bytes=2048),
    segment=SegmentConfig(max_open_duration_s=3600),
)


def _batch(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def _workload(root: Path, io: FaultyIO) -> list[tuple[int, int]]:
    """Returns ack points: (trace length when the ack was given, highest acked id)."""
    acks: list[tuple[int, int]] = []
    store = QuiverStore.open(str(root), CFG, io=io, background=False)
    nid = 0
    for step in range(6):
        store.append(_batch(nid, 40))
        nid += 40
        if step % 2:
            store.flush()
            acks.append((len(io.trace), nid - 1))
        if step in (2, 4):
            store.finalize()
    txn = store.begin_txn("app", 0, "t0")
    store.append(_batch(nid, 30), txn_id=txn)
    nid += 30
    store.flush()
    store.commit_txn("app", 0, [("p-0", txn)])
    acks.append((len(io.trace), nid - 1))
    store.maintain()
    store.finalize()
    store.close()
    return acks


def _recovered(root: str) -> list[int]:
    with QuiverStore.open(root, CFG, background=False) as store:
        store.finalize()
        return [i for b in store.scan() for i in pc.cast(b.column("id"), "int64").to_pylist()]


def test_every_crash_state_of_the_store_recovers_every_acknowledged_row(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    acks = _workload(root, io)
    states = sim.states(io.trace)
    assert len(states) > 200
    kinds: dict[str, int] = {}
    for n, state in enumerate(states):
        target = state.materialize(tmp_path / "s" / str(n))
        ids = _recovered(target)
        where = f"state {n} (point {state.point}, {state.kind} {state.detail})"
        assert len(ids) == len(set(ids)), f"{where}: duplicate rows"
        top = max(ids, default=-1)
        assert sorted(ids) == list(range(top + 1)), f"{where}: holes in recovered rows"
        acked = max((hi for at, hi in acks if at <= state.point), default=-1)
        assert top >= acked, f"{where}: acked id {acked} lost, recovered up to {top}"
        kinds[state.kind] = kinds.get(state.kind, 0) + 1
    assert {"process", "power", "torn"} <= set(kinds)
    print(f"\nT4 store crash states: {len(states)}/{len(states)} recovered, by kind {kinds}")
