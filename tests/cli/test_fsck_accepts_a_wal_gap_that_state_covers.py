"""``quiver fsck`` calls a store healthy when its WAL gap is one STATE's ``covered`` holds
(a file deleted as unneeded while an undecided transaction keeps an earlier one), and
still exits 1 naming a gap nothing explains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig

SMALL_FILES = StoreConfig(
    wal=WalConfig(flush_interval_s=0, file_size_bytes=600),
    segment=SegmentConfig(max_open_duration_s=3600),
)


def _batch(lo: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + 3), type=pa.int64())})


def _fsck(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "fsck", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _store_with_a_kept_first_file(root: Path) -> list[Path]:
    with QuiverStore.open(str(root), SMALL_FILES, background=False) as store:
        txn = store.begin_txn("app", 1)  # undecided: keeps the first WAL file
        store.append(_batch(100), txn_id=txn)
        for i in range(3):
            store.append(_batch(i * 10))
            store.finalize()  # the file it filled is unneeded and deleted
        store.append(_batch(500))
        store.flush()
        store.writer.close(finalize=False)
    return sorted((root / "partitions" / "p-0" / "wal").glob("*.wal"))


def test_quiver_fsck_calls_a_store_with_a_covered_wal_gap_healthy(tmp_path: Path) -> None:
    wal = _store_with_a_kept_first_file(tmp_path / "s")
    assert [int(p.stem) for p in wal] == [1, 10]
    res = _fsck(tmp_path / "s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "healthy: 0 problem(s)" in res.stdout
    assert "not contiguous" not in res.stdout


def test_quiver_fsck_names_a_wal_gap_nothing_covers(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with QuiverStore.open(str(root), SMALL_FILES, background=False) as store:
        for i in range(4):
            store.append(_batch(i * 10))
        store.writer.close(finalize=False)  # nothing in a segment: STATE covers nothing
    wal = sorted((root / "partitions" / "p-0" / "wal").glob("*.wal"))
    assert len(wal) >= 3
    wal[1].unlink()
    lo, hi = int(wal[1].stem), int(wal[2].stem) - 1
    res = _fsck(root)
    assert res.returncode == 1, res.stdout + res.stderr
    assert (
        f"PROBLEM wal: {wal[2]}:0: wal files not contiguous: expected first seq {lo}, "
        f"found {hi + 1} (STATE's covered does not hold seqs {lo}..{hi})"
    ) in res.stdout
    assert "UNHEALTHY: 1 problem(s)" in res.stdout
