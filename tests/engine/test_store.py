"""QuiverStore facade: round trips, recovery, sequence floor, transactions, locks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quiver_spark import (
    LockedError,
    QuiverStore,
    SchemaMismatchError,
    SegmentConfig,
    StoreConfig,
    StoreNotFoundError,
    WalConfig,
)
from quiver_spark.errors import StoreClosedError
from tests.child import run_python


def batch(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(lo, lo + n), type=pa.int64()),
            "name": pa.array([f"n{i}" for i in range(lo, lo + n)]),
        }
    )


def ids_of(store: QuiverStore) -> list[int]:
    out: list[int] = []
    for b in store.scan():
        out.extend(pc.cast(b.column("id"), "int64").to_pylist())
    return out


CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=60))


def test_appended_rows_are_readable_after_finalize(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        store.append(batch(0, 10))
        store.append(batch(10, 5))
        store.flush()
        assert store.segments() == []
        meta = store.finalize()
        assert meta is not None and meta.rows == 15 and meta.seq == 1
        assert ids_of(store) == list(range(15))
        assert store.finalize() is None


def test_close_finalizes_and_reopen_sees_the_same_segments(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        store.append(batch(0, 100))
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert [m.seq for m in store.segments()] == [1]
        assert ids_of(store) == list(range(100))
        assert store.recovery is not None and store.recovery.records_replayed == 0


def test_unfinalized_appends_are_replayed_after_a_crash(tmp_path: Path) -> None:
    code = f"""
        import os, pyarrow as pa
        from quiver_spark import QuiverStore
        s = QuiverStore.open({str(tmp_path)!r}, background=False)
        s.append(pa.record_batch({{"id": pa.array(range(7), type=pa.int64()),
                                   "name": pa.array(["a"] * 7)}}))
        s.flush()
        os._exit(0)  # no close: the open segment exists only in the WAL
        """
    run_python(code)
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        rep = store.recovery
        assert rep is not None and rep.records_replayed == 1 and rep.rows_replayed == 7
        store.finalize()
        assert ids_of(store) == list(range(7))


def test_segment_sequence_is_never_reused_after_every_segment_was_deleted(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        for i in range(3):
            store.append(batch(i * 10, 10))
            store.finalize()
        seqs = [m.seq for m in store.segments()]
        assert seqs == [1, 2, 3]
        store.segment_location.delete("p-0", seqs)
        assert store.segments() == []
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        store.append(batch(100, 1))
        meta = store.finalize()
        assert meta is not None and meta.seq == 4


def test_wal_files_are_truncated_once_their_segment_is_durable(tmp_path: Path) -> None:
    cfg = StoreConfig(
        wal=WalConfig(file_size_bytes=4096), segment=SegmentConfig(max_open_duration_s=60)
    )
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        for i in range(20):
            store.append(batch(i * 100, 100))
        store.flush()
        assert store.writer is not None
        assert len(store.writer.wal.files()) > 2
        store.finalize()
        assert store.writer.wal.files() == []  # every record is in a durable segment
        assert ids_of(store) == list(range(2000))


def test_size_target_finalizes_the_open_segment_by_itself(tmp_path: Path) -> None:
    cfg = StoreConfig(segment=SegmentConfig(target_size_bytes=20_000, max_open_duration_s=60))
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        for i in range(10):
            store.append(batch(i * 500, 500))
        assert len(store.segments()) >= 3


def test_idle_open_segment_is_finalized_by_the_background_maintenance(tmp_path: Path) -> None:
    cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=0.2))
    with QuiverStore.open(str(tmp_path), cfg) as store:
        store.append(batch(0, 3))
        deadline = time.monotonic() + 10
        while not store.segments() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [m.rows for m in store.segments()] == [3]


def test_incompatible_schema_is_refused_with_both_schemas_named(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        store.append(batch(0, 1))
        other = pa.record_batch({"id": pa.array(["x"]), "name": pa.array(["y"])})
        with pytest.raises(SchemaMismatchError) as e:
            store.append(other)
        assert "id: int64" in str(e.value) and "id: string" in str(e.value)


def test_read_only_handle_refuses_appends_and_missing_store_is_a_clear_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(StoreNotFoundError, match="not a Quiver store"):
        QuiverStore.open(str(tmp_path / "nope"), partition=None, create=False)
    QuiverStore.open(str(tmp_path), CFG, background=False).close()
    with QuiverStore.open(str(tmp_path), partition=None) as ro:
        with pytest.raises(StoreClosedError, match="without a partition"):
            ro.append(batch(0, 1))


# -- transactions (§10) ------------------------------------------------------------------


def test_transaction_rows_stay_invisible_until_committed(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        txn = store.begin_txn("q1", 0, "0.0")
        store.append(batch(0, 5), txn_id=txn)
        store.flush()
        assert store.finalize() is None
        assert store.commit_txn("q1", 0, [("p-0", txn)]) is True
        store.maintain()
        assert store.finalize() is not None
        assert ids_of(store) == list(range(5))


def test_committed_rows_age_from_their_append_not_from_their_commit(tmp_path: Path) -> None:
    # visibility within max_open_duration of the write: a commit that arrives after
    # the data is already that old seals it on the next tick, not a full period later
    cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=0.3))
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        young = store.begin_txn("q1", 0, "0.0")
        store.append(batch(0, 5), txn_id=young)
        store.flush()
        assert store.commit_txn("q1", 0, [("p-0", young)])
        assert store.maintain()["finalized"] == []  # committed, but only just written
        time.sleep(0.35)
        assert store.maintain()["finalized"] == [("p-0", 1)]
        old = store.begin_txn("q1", 1, "0.0")
        store.append(batch(5, 5), txn_id=old)
        store.flush()
        time.sleep(0.35)  # the batch's commit comes late (a slow task elsewhere)
        assert store.commit_txn("q1", 1, [("p-0", old)])
        assert store.maintain()["finalized"] == [("p-0", 2)]
        assert ids_of(store) == list(range(10))


def test_losing_attempts_are_discarded_and_a_replayed_commit_is_a_no_op(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        a0 = store.begin_txn("q1", 7, "0.0")
        store.append(batch(0, 5), txn_id=a0)
        a1 = store.begin_txn("q1", 7, "0.1")  # a retry of the same task
        store.append(batch(0, 5), txn_id=a1)
        store.flush()
        assert store.commit_txn("q1", 7, [("p-0", a1)])
        rerun = store.begin_txn("q1", 7, "0.0")  # batch rerun after a driver restart
        store.append(batch(0, 5), txn_id=rerun)
        assert store.commit_txn("q1", 7, [("p-0", rerun)]) is False
        store.maintain()
        store.finalize()
        assert ids_of(store) == list(range(5))
        assert store.writer is not None and store.writer.pending_txns() == []


def test_pending_transactions_survive_a_crash_and_commit_after_recovery(tmp_path: Path) -> None:
    code = f"""
        import os, pyarrow as pa
        from quiver_spark import QuiverStore
        s = QuiverStore.open({str(tmp_path)!r}, background=False)
        t = s.begin_txn("q9", 3, "1.0")
        s.append(pa.record_batch({{"id": pa.array(range(4), type=pa.int64()),
                                   "name": pa.array(["a"] * 4)}}), txn_id=t)
        s.flush()
        print(t, flush=True)
        os._exit(0)
        """
    txn = int(run_python(code, capture=True).stdout)
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert store.recovery is not None and store.recovery.pending_txns == 1
        assert store.finalize() is None
        store.commit_txn("q9", 3, [("p-0", txn)])
        store.maintain()
        store.finalize()
        assert ids_of(store) == list(range(4))


def test_finalize_idle_partitions_seals_committed_data_of_a_dead_writer(tmp_path: Path) -> None:
    code = f"""
        import os, pyarrow as pa
        from quiver_spark import QuiverStore
        s = QuiverStore.open({str(tmp_path)!r}, partition="exec-1", background=False)
        t = s.begin_txn("q2", 0, "0.0")
        s.append(pa.record_batch({{"id": pa.array(range(3), type=pa.int64()),
                                   "name": pa.array(["a"] * 3)}}), txn_id=t)
        s.flush()
        s.commit_txn("q2", 0, [("exec-1", t)])
        os._exit(0)
        """
    run_python(code)
    with QuiverStore.open(str(tmp_path), partition=None) as ro:
        assert ro.segments() == []
        assert ro.finalize_idle_partitions() == [("exec-1", 1)]
        assert ids_of(ro) == [0, 1, 2]


# -- one writer per partition ----------------------------------------------------------------


def test_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False):
        with pytest.raises(LockedError, match="this process"):
            QuiverStore.open(str(tmp_path), CFG, background=False)


def test_writer_in_another_process_is_named_and_its_death_frees_the_lock(tmp_path: Path) -> None:
    code = f"""
        import sys, time
        from quiver_spark import QuiverStore
        s = QuiverStore.open({str(tmp_path)!r}, background=False)
        print("ready", flush=True)
        time.sleep(60)
        """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(LockedError, match=f"pid {proc.pid}"):
            QuiverStore.open(str(tmp_path), CFG, background=False)
    finally:
        proc.kill()
        proc.wait()
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert store.writer is not None


def test_eacces_at_open_names_the_path_and_operation(tmp_path: Path) -> None:
    from quiver_spark.fs import FileIO

    class Denied(FileIO):
        def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
            if op == "mkdir" and "partitions" in path:
                raise PermissionError(13, "Permission denied", path)

    with pytest.raises(PermissionError) as e:
        QuiverStore.open(str(tmp_path), CFG, io=Denied(), background=False)
    assert "partitions" in str(e.value) and "Permission denied" in str(e.value)
    assert not os.path.exists(tmp_path / "partitions" / "p-0" / "LOCK")


def test_wall_clock_jumping_back_changes_neither_order_nor_finalize_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        store.append(batch(0, 2))
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() - 10**9 * 86400 * 365)
        store.append(batch(2, 2))
        assert store.maintain()["finalized"] == []  # age is measured on the monotonic clock
        meta = store.finalize()
        assert meta is not None
        assert meta.seq == 1 and ids_of(store) == [0, 1, 2, 3]


def test_records_after_a_fully_truncated_wal_survive_a_crash(tmp_path: Path) -> None:
    """Regression: an empty WAL dir must not restart record seqs at 1 (they would look
    covered by the old segment and be skipped by the next recovery)."""
    code = f"""
        import os, pyarrow as pa
        from quiver_spark import QuiverStore
        s = QuiverStore.open({str(tmp_path)!r}, background=False)
        assert s.writer.wal.files() == []
        s.append(pa.record_batch({{"id": pa.array(range(100, 103), type=pa.int64()),
                                   "name": pa.array(["a"] * 3)}}))
        s.flush()
        os._exit(0)
        """
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        for i in range(3):
            store.append(batch(i * 10, 10))
        store.finalize()
        assert store.writer is not None and store.writer.wal.files() == []
    run_python(code)
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert store.recovery is not None and store.recovery.rows_replayed == 3
        store.finalize()
        assert ids_of(store) == [*range(30), 100, 101, 102]
