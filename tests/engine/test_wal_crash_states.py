"""CrashSimulator: its model, and every crash state of a WAL workload recovers."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa

from quiver_spark.config import WalConfig
from quiver_spark.format import REC_BATCH
from quiver_spark.fs import FileIO
from quiver_spark.wal import WalDecoder, WalWriter, recover_wal
from tests.faults import CrashSimulator, FaultyIO

NEVER = 3600.0


def test_simulator_drops_unsynced_data_and_undirsynced_entries(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "old").write_bytes(b"keep")
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    fd = io.open_create(str(root / "a"))
    io.write(fd, b"hello ")
    io.fsync(fd)
    io.write(fd, b"world")
    io.close(fd)
    io.fsync_dir(str(root))
    io.atomic_write(str(root / "b"), b"meta")
    io.unlink(str(root / "old"))
    states = sim.states(io.trace)
    final = [s for s in states if s.point == len(io.trace)]
    by_kind = {s.kind: s.files for s in final if s.kind in ("process", "power", "power-meta")}
    assert by_kind["process"] == {"a": b"hello world", "b": b"meta"}
    # the last fsync_dir (in atomic_write) came before the unlink: "old" is still there
    assert by_kind["power"] == {"a": b"hello ", "b": b"meta", "old": b"keep"}
    assert by_kind["power-meta"] == {"a": b"hello ", "b": b"meta"}
    before_dirsync = [s for s in states if s.point == 4 and s.kind == "power"]
    assert before_dirsync[0].files == {"old": b"keep"}  # "a" created but its entry not durable
    torn = [s.files["a"] for s in states if s.kind == "torn" and s.point == 2]
    assert b"h" in torn and b"hel\0\0\0" in torn
    prefix = [s.files["a"] for s in final if s.kind == "power-prefix"]
    assert prefix == []  # "a" holds one unsynced write: no boundary strictly inside it
    mat = final[0].materialize(tmp_path / "m")
    assert sorted(os.listdir(mat)) == ["a", "b"]


def test_simulator_follows_renames_and_truncates(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    sim = CrashSimulator(root, {})
    io = FaultyIO(record_data=True)
    io.atomic_write(str(root / "f"), b"0123456789")
    io.truncate(str(root / "f"), 4)
    states = sim.states(io.trace)
    last = {s.kind: s.files for s in states if s.point == len(io.trace)}
    assert last["process"] == {"f": b"0123"}
    assert last["power"] == {"f": b"0123456789"}  # truncation never fsynced


def batch(i: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(i * 40, (i + 1) * 40), pa.int64()), "s": [f"x{i}"] * 40}
    )


def test_every_crash_state_of_a_wal_workload_recovers_every_acked_record(tmp_path):
    root = tmp_path / "wal"
    root.mkdir()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    cfg = WalConfig(flush_interval_s=NEVER, file_size_bytes=6 * 1024)
    w = WalWriter(str(root), cfg, next_record_seq=1, io=io)
    acks: list[tuple[int, int]] = []  # (trace length when flush() returned, durable seq)
    deleted: list[tuple[int, set[int]]] = []  # (trace length before delete, seqs in the files)
    for i in range(14):
        w.append_batch(batch(i), ingestion_ns=i)
        if i % 2 == 1:
            durable = w.flush()
            acks.append((len(io.trace), durable))
        if i == 9:
            gone = w.files()[:1]
            end = w.files()[1].first_seq
            deleted.append((len(io.trace), set(range(gone[0].first_seq, end))))
            w.delete_files(gone)
    w.close()
    states = sim.states(io.trace)
    kinds = Counter(s.kind for s in states)
    lost_unacked = torn_cut = 0
    for n, state in enumerate(states):
        d = state.materialize(tmp_path / "states" / str(n))
        rec = recover_wal(d, io=FileIO())
        acked = max([seq for at, seq in acks if at <= state.point], default=0)
        may_be_gone = set().union(*[s for at, s in deleted if at < state.point])
        dec = WalDecoder()
        seqs, batches = [], []
        for r in rec.records():
            b = dec.decode(r)
            seqs.append(r.seq)
            if r.rtype == REC_BATCH:
                batches.append(b)
        where = f"state {n} ({state.kind} at {state.point} {state.detail})"
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)) if seqs else []), where
        missing = set(range(1, acked + 1)) - set(seqs) - may_be_gone
        assert not missing, f"{where}: acked records lost: {sorted(missing)}"
        assert all(b in [batch(i) for i in range(14)] for b in batches), where
        lost_unacked += bool(seqs) and seqs[-1] < w.next_seq - 1
        torn_cut += bool(rec.torn)
    assert len(states) >= 150, kinds
    assert set(kinds) == {"process", "power", "power-meta", "power-prefix", "torn"}
    assert lost_unacked > 0 and torn_cut > 0  # the states really lose and tear data
