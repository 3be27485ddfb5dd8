"""Crash states of checkpoint/rotation and retention; failing the i-th I/O op."""

from __future__ import annotations

import errno

import pytest

from quiver_spark.config import RetentionConfig, SizeCapPolicy
from quiver_spark.retention import apply_retention
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from tests.engine.subscriber_helpers import DirCatalog
from tests.faults import CrashSimulator, FaultyIO

P = "p-0"


def _ack_workload(root: str, io: FaultyIO) -> list[tuple[int, tuple[str, str, int]]]:
    """Register, ack out of order, checkpoint + rotate twice. Returns (trace index, ack)."""
    acked: list[tuple[int, tuple[str, str, int]]] = []
    r = SubscriberRegistry.open(root, io=io, checkpoint_records=4)
    r.register("a")
    acked.append((len(io.trace), ("a", "", 0)))
    r.register("b", start={P: 2})
    acked.append((len(io.trace), ("b", "", 0)))
    for sub, seq in [("a", 2), ("a", 1), ("b", 4), ("a", 3), ("b", 3), ("a", 5), ("b", 5)]:
        r.record(sub, P, [seq], Outcome.ACK)
        acked.append((len(io.trace), (sub, P, seq)))
    r.record("a", P, [9], Outcome.NACK)
    acked.append((len(io.trace), ("-b", "", 0)))  # issued here: may take effect from now on
    r.deregister("b")
    r.close()
    return acked


def test_every_crash_state_of_acks_checkpoint_and_rotation_keeps_every_acked_outcome(tmp_path):
    root = tmp_path / "w"
    root.mkdir()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    acked = _ack_workload(str(root), io)
    assert io.counts["rename"] >= 3  # checkpoints and rotations happened
    states = sim.states(io.trace)
    for k, state in enumerate(states):
        target = state.materialize(tmp_path / f"s{k}")
        reg = SubscriberRegistry.open(target)
        try:
            done = [a for i, a in acked if i <= state.point]
            gone = {a[0][1:] for a in done if a[0].startswith("-")}
            for sub, part, seq in done:
                if sub.startswith("-") or sub in gone:
                    continue
                assert sub in reg.subscribers(), (state.kind, state.point, sub)
                if seq:
                    assert reg.is_done(sub, part, seq), (state.kind, state.point, sub, seq)
            # a second open (after any torn-tail repair) sees the same state
            again = SubscriberRegistry.open(target)
            assert again.state.digest() == reg.state.digest()
            again.close()
        finally:
            reg.close()
    assert len(states) > 100


def _retention_setup(root: str) -> None:
    cat = DirCatalog(root)
    for seq in range(1, 9):
        cat.add(P, seq, 100, seq)
    r = SubscriberRegistry.open(root)
    r.register("a", retained=cat.retained())
    r.register("b", retained=cat.retained())
    r.record("a", P, [1, 2, 3, 6], Outcome.ACK)
    r.record("b", P, [1, 2, 5], Outcome.ACK)
    r.close()


@pytest.mark.parametrize("policy", [SizeCapPolicy.BACKPRESSURE, SizeCapPolicy.DROP_OLDEST])
def test_every_crash_state_of_retention_deletes_nothing_still_needed(tmp_path, policy):
    root = tmp_path / "w"
    root.mkdir()
    _retention_setup(str(root))
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    reg = SubscriberRegistry.open(str(root), io=io)
    cfg = RetentionConfig(size_cap_bytes=350, size_cap_policy=policy)
    res = apply_retention(DirCatalog(str(root), io), reg, cfg, now_ns=100)
    reg.close()
    expected_gone = {1, 2} if policy is SizeCapPolicy.BACKPRESSURE else {1, 2, 3, 4, 5}
    assert set(res.deleted[P]) == expected_gone
    for k, state in enumerate(sim.states(io.trace)):
        target = state.materialize(tmp_path / f"s{k}")
        retained = set(DirCatalog(target).retained().get(P, []))
        r = SubscriberRegistry.open(target)
        try:
            for seq in set(range(1, 9)) - retained:
                for sub in ("a", "b"):  # deleted => done (acked, or dropped recorded first)
                    assert r.is_done(sub, P, seq), (state.kind, state.point, sub, seq)
                if policy is SizeCapPolicy.BACKPRESSURE:
                    assert seq in (1, 2)  # only what both had acked
            for sub, seqs in (("a", {1, 2, 3, 6}), ("b", {1, 2, 5})):
                assert all(r.is_done(sub, P, s) for s in seqs)
        finally:
            r.close()


@pytest.mark.parametrize("op", ["write", "fsync", "rename", "fsync_dir", "unlink", "open"])
def test_failing_the_kth_io_op_never_loses_an_acknowledged_outcome(tmp_path, op):
    probe = FaultyIO()
    _ack_workload(str(tmp_path / "probe"), probe)
    total = probe.counts[op]
    assert total > 0
    for k in range(1, total + 1):
        root = str(tmp_path / f"{op}{k}")
        io = FaultyIO()
        io.fail(op, k, errno.EIO)
        acked: list[tuple[str, str, int]] = []
        try:
            r = SubscriberRegistry.open(root, io=io, checkpoint_records=4)
            r.register("a")
            for seq in (2, 1, 3, 5, 4, 6, 7, 8):
                r.record("a", P, [seq], Outcome.ACK)
                acked.append(("a", P, seq))
            r.close()
        except OSError:
            pass
        again = SubscriberRegistry.open(root)
        for sub, part, seq in acked:
            assert again.is_done(sub, part, seq), (op, k, seq)
        again.close()
