"""A failed write or fsync is fatal for the writer instance: never retried, never acknowledged."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from quiver_spark.config import WalConfig
from quiver_spark.errors import WalFailedError
from quiver_spark.format import REC_BATCH, REC_TXN
from quiver_spark.wal import WalDecoder, WalWriter, encode_txn, recover_wal
from tests.faults import FaultyIO, InjectedError

NEVER = 3600.0
KiB = 1024


def batch(i: int, rows: int = 60) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
            "s": pa.array([f"{i:04d}-{j:04d}" for j in range(rows)]),
        }
    )


@dataclass
class Run:
    writer: WalWriter | None
    error: WalFailedError | None
    acked: int = 0  # highest seq whose durability was acknowledged
    batches: dict[int, int] = field(default_factory=dict)  # batch seq -> batch index
    torn: list[tuple[str, int, int]] = field(default_factory=list)  # cut by recovery


def workload(wal_dir: str, io: FaultyIO, interval: float, n: int = 20) -> Run:
    """Appends with periodic flushes, one explicit rotate and size rotations."""
    run = Run(None, None)
    cfg = WalConfig(flush_interval_s=interval, file_size_bytes=12 * KiB)
    try:
        run.writer = w = WalWriter(wal_dir, cfg, next_record_seq=1, io=io)
        for i in range(n):
            seq = w.append_batch(batch(i), ingestion_ns=i)
            run.batches[seq] = i
            if interval == 0:
                run.acked = seq
            if i % 3 == 2:
                run.acked = w.flush()
            if i == 7:
                w.rotate()
        run.acked = w.flush()
    except WalFailedError as e:
        run.error = e
    return run


def assert_failed_for_good(run: Run, io: FaultyIO, err: int) -> None:
    """After the failure nothing succeeds, nothing more is durable, nothing is retried."""
    w, e = run.writer, run.error
    assert w is not None and e is not None, "the injected fault was not reported"
    assert isinstance(e.__cause__, InjectedError) and e.errno == err == e.__cause__.errno
    assert os.strerror(err) in str(e) and "recovers it from disk" in str(e)
    failed_at = next(t.index for t in io.trace if t.failed)
    durable = w.durable_seq
    assert run.acked <= durable < w.next_seq
    attempts = [
        lambda: w.append_batch(batch(99), ingestion_ns=0),
        lambda: w.append(REC_TXN, encode_txn("a", 1), ingestion_ns=0),
        w.flush,
        w.rotate,
    ]
    if durable < w.next_seq - 1:  # a record appended but never durable: waiting fails
        attempts.append(lambda: w.wait_durable(w.next_seq - 1, timeout=1))
    for attempt in attempts:
        with pytest.raises(WalFailedError):
            attempt()
    w.close()
    w.close()
    assert w.durable_seq == durable
    later = [t for t in io.trace[failed_at + 1 :] if t.op in ("write", "fsync", "open")]
    assert later == [], f"operations after the failure: {later}"


def assert_recovers_acked_prefix(wal_dir: str, run: Run, rows: int = 60) -> int:
    """Recovery yields seqs 1..m (m >= acked), the batches whole and in the order sent.

    A record written but not acknowledged (its fsync failed) may survive too.
    """
    rec = recover_wal(wal_dir)
    dec = WalDecoder()
    seqs, batches = [], []
    for r in rec.records():
        b = dec.decode(r)
        if r.rtype == REC_BATCH:
            batches.append(b)
            assert run.batches.get(r.seq, len(batches) - 1) == len(batches) - 1, r.seq
        seqs.append(r.seq)
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= run.acked
    assert batches == [batch(i, rows) for i in range(len(batches))]
    run.torn = rec.torn
    return rec.next_record_seq


def resume(wal_dir: str, next_seq: int) -> None:
    w = WalWriter(wal_dir, WalConfig(flush_interval_s=0), next_record_seq=next_seq)
    seq = w.append_batch(batch(500), ingestion_ns=0)
    w.close()
    dec = WalDecoder()
    got = [(r.seq, dec.decode(r)) for r in recover_wal(wal_dir).records()]
    assert got[-1] == (seq, batch(500))


def count_ops(tmp_path, interval: float, op: str) -> int:
    io = FaultyIO()
    d = tmp_path / "count"
    d.mkdir()
    run = workload(str(d), io, interval)
    assert run.error is None
    run.writer.close()
    return io.counts[op]


# -- a failed fsync (EIO) ----------------------------------------------------------------


@pytest.mark.parametrize("interval", [NEVER, 0.0], ids=["explicit-flush", "fsync-per-append"])
def test_eio_at_every_kth_fsync_fails_the_writer_for_good_without_retry(tmp_path, interval):
    total = count_ops(tmp_path, interval, "fsync")
    assert total >= 10
    for k in range(1, total + 1):
        d = tmp_path / f"k{k}"
        d.mkdir()
        io = FaultyIO()
        io.fail("fsync", k, errno.EIO)
        run = workload(str(d), io, interval)
        failed = [t for t in io.trace if t.failed]
        assert len(failed) == 1 and failed[0].op == "fsync", k
        assert_failed_for_good(run, io, errno.EIO)
        resume(str(d), assert_recovers_acked_prefix(str(d), run))


def test_a_failed_background_fsync_fails_waiters_and_is_never_retried(tmp_path):
    io = FaultyIO()
    io.fail("fsync", 2, errno.EIO)  # the 1st fsync is the new file's header
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=0.005), next_record_seq=1, io=io)
    seq = w.append_batch(batch(0), ingestion_ns=0)
    with pytest.raises(WalFailedError) as e:
        w.wait_durable(seq, timeout=5)
    assert e.value.errno == errno.EIO and w.durable_seq == 0
    time.sleep(0.05)  # the flusher would have retried by now
    with pytest.raises(WalFailedError):
        w.append_batch(batch(1), ingestion_ns=0)
    with pytest.raises(WalFailedError):
        w.flush()
    w.close()
    path = w.files()[0].path
    assert len([t for t in io.trace if t.op == "fsync" and t.path == path]) == 2
    assert w.durable_seq == 0


# -- a full disk (ENOSPC) ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["write", "fsync", "fsync_dir", "open"])
def test_enospc_at_every_operation_gives_a_clear_error_and_an_acked_prefix(tmp_path, op):
    total = count_ops(tmp_path, NEVER, op)
    assert total >= 3
    partial_records_cut = 0
    for k in range(1, total + 1):
        d = tmp_path / f"k{k}"
        d.mkdir()
        io = FaultyIO()
        io.fail(op, k, errno.ENOSPC, sticky=True, partial=op == "write")
        run = workload(str(d), io, NEVER)
        assert_failed_for_good(run, io, errno.ENOSPC)
        resume(str(d), assert_recovers_acked_prefix(str(d), run))
        partial_records_cut += bool(run.torn)
    if op == "write":  # half-written records (and headers) reached the disk and were cut
        assert partial_records_cut == total


def test_a_real_full_tmpfs_gives_a_clear_error_and_keeps_the_acked_prefix(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 2 MB tmpfs: {(r.stderr or r.stdout).strip()}")
    try:
        d = str(mnt / "wal")
        os.mkdir(d)
        cfg = WalConfig(flush_interval_s=0, file_size_bytes=256 * KiB)
        w = WalWriter(d, cfg, next_record_seq=1)
        run = Run(w, None)
        for i in range(1000):
            try:
                seq = w.append_batch(batch(i, rows=3000), ingestion_ns=i)
            except WalFailedError as e:
                run.error = e
                break
            run.batches[seq] = i
            run.acked = seq  # flush_interval 0: durable on return
        assert run.error is not None, "the tmpfs never filled up"
        assert run.error.errno == errno.ENOSPC and "No space left on device" in str(run.error)
        assert 5 <= len(run.batches) < 1000
        with pytest.raises(WalFailedError):
            w.append(REC_TXN, encode_txn("a", 1), ingestion_ns=0)
        w.close()
        next_seq = assert_recovers_acked_prefix(d, run, rows=3000)
        # space frees (the oldest files go), appends resume on a new writer
        w2 = WalWriter(d, cfg, next_record_seq=next_seq)
        w2.delete_files(w2.files()[:3])
        seq = w2.append_batch(batch(7, rows=3000), ingestion_ns=0)
        w2.close()
        dec = WalDecoder()
        recs = list(recover_wal(d).records())
        assert recs[-1].seq == seq and [dec.decode(r) for r in recs][-1] == batch(7, rows=3000)
        del recs, dec
    finally:
        gc.collect()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
