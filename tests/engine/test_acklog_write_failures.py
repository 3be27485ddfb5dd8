"""A failed ack-log write never leaves the registry unusable for the life of the process.

After an error the registry's in-memory state is what recovery rebuilds from disk (the
next call rebuilds it by itself, no reopen); a failed fsync is never retried on the same
log file (the next write goes to a new generation); a full disk heals once space returns;
and through the store, a retention pass that hit the failure is retried by the next one,
so a throttled writer appends again once another process frees space.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, SizeCapPolicy, StoreConfig
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscribers import log as acklog
from tests.faults import FaultyIO

P = "p-0"


def _logs(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / "subscribers") if n.startswith("ack-"))


def _fresh_digest(root: Path) -> dict:
    with SubscriberRegistry.open(str(root)) as again:
        return again.state.digest()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, FaultyIO, SubscriberRegistry]:
    io = FaultyIO()
    reg = SubscriberRegistry.open(str(tmp_path), io=io)
    reg.register("a")
    reg.record("a", P, [1], Outcome.ACK)
    return tmp_path, io, reg


def test_one_enospc_on_the_ack_log_fails_that_call_only_and_the_next_one_succeeds(setup):
    root, io, reg = setup
    io.fail("write", 1, errno.ENOSPC, path_contains="ack-", partial=True)
    with pytest.raises(OSError) as e:
        reg.record("a", P, [2], Outcome.ACK)
    assert e.value.errno == errno.ENOSPC
    assert reg.state.digest() == _fresh_digest(root)  # nothing half-applied in memory
    reg.record("a", P, [2, 3], Outcome.ACK)  # no reopen needed
    assert reg.hwm("a", P) == 3
    assert _fresh_digest(root) == reg.state.digest()
    reg.close()


def test_a_disk_that_stays_full_keeps_failing_with_enospc_and_heals_once_space_returns(setup):
    root, io, reg = setup
    fault = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains="ack-")
    for seq in (2, 3, 4):
        with pytest.raises(OSError) as e:
            reg.record("a", P, [seq], Outcome.ACK)
        assert e.value.errno == errno.ENOSPC, e.value
    io.faults.remove(fault)  # another process freed space
    reg.record("a", P, [2], Outcome.ACK)
    reg.register("b")
    assert reg.hwm("a", P) == 2 and reg.subscribers() == ["a", "b"]
    assert _fresh_digest(root) == reg.state.digest()
    reg.close()


def test_a_failed_fsync_is_never_retried_on_the_same_log_file(setup):
    root, io, reg = setup
    failing = os.path.join(str(root), "subscribers", _logs(root)[-1])
    io.fail("fsync", 1, errno.EIO, path_contains="ack-")
    with pytest.raises(OSError):
        reg.record("a", P, [2], Outcome.ACK)
    mark = len(io.trace)
    reg.record("a", P, [2], Outcome.ACK)
    later = io.trace[mark:]
    assert not [t for t in later if t.path == failing and t.op in ("write", "fsync")]
    assert [t for t in later if t.op == "fsync" and "ack-" in t.path]
    assert len(_logs(root)) == 2  # the next write went to a new generation
    assert reg.hwm("a", P) == 2
    assert _fresh_digest(root) == reg.state.digest()
    reg.close()


def test_a_failed_write_seen_by_another_process_is_cut_back_and_invisible(setup):
    root, io, reg = setup
    io.fail("write", 1, errno.ENOSPC, path_contains="ack-", partial=True)
    with pytest.raises(OSError):
        reg.record("a", P, [2], Outcome.ACK)
    with SubscriberRegistry.open(str(root)) as other:
        assert other.hwm("a", P) == 1
        assert not other.report.torn
    reg.close()


def test_a_failed_checkpoint_after_a_durable_append_does_not_fail_the_append(tmp_path):
    io = FaultyIO()
    reg = SubscriberRegistry.open(str(tmp_path), io=io, checkpoint_records=3)
    reg.register("a")
    io.fail("rename", 1, errno.ENOSPC, path_contains="CHECKPOINT")
    reg.record("a", P, [1, 3, 5], Outcome.ACK)  # durable: the checkpoint is maintenance
    assert reg.is_done("a", P, 5)
    reg.record("a", P, [2], Outcome.ACK)  # the checkpoint is retried and succeeds
    assert io.ops("rename")[-1].failed is False
    assert _fresh_digest(tmp_path) == reg.state.digest()
    reg.close()


def _cfg(**retention: object) -> StoreConfig:
    return StoreConfig(
        segment=SegmentConfig(max_open_duration_s=3600),
        retention=RetentionConfig(**retention),  # type: ignore[arg-type]
    )


def _batch(lo: int, n: int = 1000) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def test_a_retention_pass_that_hit_enospc_is_retried_and_the_cap_is_enforced_again(tmp_path):
    io = FaultyIO()
    cfg = _cfg(size_cap_bytes=20_000, size_cap_policy=SizeCapPolicy.DROP_OLDEST)
    with QuiverStore.open(str(tmp_path), cfg, io=io, background=False) as store:
        store.subscribers.register("s")
        io.fail("write", 1, errno.ENOSPC, path_contains="ack-")
        for i in range(6):
            store.append(_batch(i * 1000))
            store.finalize()  # the first pass over the cap fails; later ones must not
        assert isinstance(store.maintenance_error, OSError)
        result = store.run_retention()
        assert result.plan.bytes_after <= 20_000
        assert sum(m.size_bytes for m in store.segments()) <= 20_000


def test_a_throttled_writer_appends_again_after_another_process_frees_space(tmp_path):
    io = FaultyIO()
    cfg = _cfg(size_cap_bytes=20_000, backpressure_timeout_s=2.0)
    with QuiverStore.open(str(tmp_path), cfg, io=io, background=False) as store:
        store.subscribers.register("s")
        for i in range(3):
            store.append(_batch(i * 1000))
            store.finalize()
        assert store.run_retention().throttle
        fault = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains="ack-")
        with pytest.raises(OSError):
            store.subscribers.record("s", P, [1], Outcome.ACK)
        io.faults.remove(fault)
        # another process acknowledges everything: the next pass may delete it
        with SubscriberRegistry.open(str(tmp_path)) as other:
            other.record("s", P, [m.seq for m in store.segments()], Outcome.ACK)
        store.append(_batch(99_000))  # admitted: no reopen, no StoreClosedError
        assert store.flush() > 0
        assert [m.seq for m in store.segments()] == [], "acknowledged segments were kept"


def test_a_new_log_generation_is_read_by_other_processes(setup):
    root, io, reg = setup
    io.fail("fsync", 1, errno.EIO, path_contains="ack-")
    with pytest.raises(OSError):
        reg.record("a", P, [2], Outcome.ACK)
    reg.record("a", P, [2, 3], Outcome.ACK)
    gens = acklog.list_generations(io, os.path.join(str(root), "subscribers"))
    assert len(gens) == 2
    with SubscriberRegistry.open(str(root)) as other:
        assert other.hwm("a", P) == 3
    reg.close()


WRITER = """
import errno, sys
import pyarrow as pa
from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig
from quiver_spark import StoreAtCapacityError
from tests.faults import FaultyIO

def batch(lo):
    return pa.record_batch({"id": pa.array(range(lo, lo + 1000), type=pa.int64())})

io = FaultyIO()
cfg = StoreConfig(
    segment=SegmentConfig(max_open_duration_s=3600),
    retention=RetentionConfig(size_cap_bytes=20_000, backpressure_timeout_s=0.5),
)
with QuiverStore.open(root, cfg, io=io, background=False) as store:
    for i in range(3):
        store.append(batch(i * 1000))
        store.finalize()
    print("throttled" if store.run_retention().throttle else "not throttled", flush=True)
    sys.stdin.readline()  # a consumer acknowledged segment 1: a pass may delete it
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains="ack-")
    try:
        store.run_retention()
    except OSError as e:
        print("pass failed", errno.errorcode[e.errno], flush=True)
    try:
        store.append(batch(50_000))
    except StoreAtCapacityError:
        print("refused while the disk is full", flush=True)
    io.faults.remove(full)
    print("space freed", flush=True)
    sys.stdin.readline()  # a consumer acknowledged everything
    store.append(batch(60_000))
    store.flush()
    print("admitted", [m.seq for m in store.segments()], flush=True)
"""


def test_a_writer_process_whose_pass_hit_a_full_disk_appends_again_once_space_returns(tmp_path):
    root = str(tmp_path)
    with SubscriberRegistry.open(root) as reg:
        reg.register("s")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    writer = subprocess.Popen(
        [sys.executable, "-c", f"root = {root!r}\n" + WRITER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert writer.stdin is not None and writer.stdout is not None
    assert writer.stdout.readline().strip() == "throttled"
    ack = "from quiver_spark.subscribers import *\nwith SubscriberRegistry.open(root) as r:\n"
    ack += "    r.record('s', 'p-0', seqs, Outcome.ACK)\n"
    subprocess.run([sys.executable, "-c", f"root, seqs = {root!r}, [1]\n" + ack], env=env,
                   check=True)  # fmt: skip
    writer.stdin.write("\n")
    writer.stdin.flush()
    assert writer.stdout.readline().split() == ["pass", "failed", "ENOSPC"]
    assert writer.stdout.readline().strip() == "refused while the disk is full"
    assert writer.stdout.readline().strip() == "space freed"
    subprocess.run([sys.executable, "-c", f"root, seqs = {root!r}, [1, 2, 3]\n" + ack], env=env,
                   check=True)  # fmt: skip
    writer.stdin.write("\n")
    writer.stdin.flush()
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert out.strip() == "admitted []", out
