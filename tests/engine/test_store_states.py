"""Store states that once lost acknowledged rows, wedged a partition or reused a seq.

Each test is the user-visible sequence (a writer process that dies with ``os._exit``
right after its last acknowledged step, then a reopen), not a unit test of one
function: the bugs lived between functions.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.config import RetentionConfig
from quiver_spark.errors import BatchTooLargeError, ConfigError
from quiver_spark.subscribers import Outcome
from tests.child import run_python

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=60))


def ids(values: list[int], *, nullable: bool) -> pa.RecordBatch:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=nullable)])
    return pa.record_batch([pa.array(values, type=pa.int64())], schema=schema)


def all_ids(store: QuiverStore) -> list[int]:
    """Every row the store holds, sealing a writer's open segment first."""
    if store.writer is not None:
        store.finalize()
    out: list[int] = []
    for b in store.scan():
        out.extend(pc.cast(b.column("id"), "int64").to_pylist())
    return sorted(out)


CHILD_PRELUDE = """
import os, pyarrow as pa
from quiver_spark import *
from quiver_spark.config import *

def ids(values, nullable):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=nullable)])
    return pa.record_batch([pa.array(values, type=pa.int64())], schema=schema)
"""


def run_child(body: str, **names: object) -> None:
    """Run ``body`` in a fresh interpreter that dies with os._exit(0) at its end."""
    run_python(CHILD_PRELUDE + textwrap.dedent(body) + "\nos._exit(0)\n", **names)


def test_nullability_change_keeps_every_acknowledged_plain_row(tmp_path: Path) -> None:
    run_child(
        """
        s = QuiverStore.open(root, StoreConfig(segment=SegmentConfig(max_open_duration_s=60)),
                             background=False)
        s.append(ids([1, 2, 3], nullable=False))
        s.append(ids([10, 11], nullable=True))   # same columns, other nullability
        s.flush()
        """,
        root=str(tmp_path),
    )
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert all_ids(store) == [1, 2, 3, 10, 11]


def test_nullability_change_keeps_committed_transactions(tmp_path: Path) -> None:
    run_child(
        """
        s = QuiverStore.open(root, StoreConfig(segment=SegmentConfig(max_open_duration_s=60)),
                             background=False)
        a = s.begin_txn("query-a", 0)
        s.append(ids([1, 2, 3], nullable=False), txn_id=a)
        b = s.begin_txn("query-b", 0)
        s.append(ids([10, 11], nullable=True), txn_id=b)
        s.flush()
        s.commit_txn("query-a", 0, [("p-0", a)])
        s.commit_txn("query-b", 0, [("p-0", b)])
        s.maintain()
        """,
        root=str(tmp_path),
    )
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert all_ids(store) == [1, 2, 3, 10, 11]


def test_nullability_change_with_a_later_undecided_transaction_opens(tmp_path: Path) -> None:
    """A later pending transaction pins the WAL file: the partition still opens."""
    run_child(
        """
        s = QuiverStore.open(root, StoreConfig(segment=SegmentConfig(max_open_duration_s=60)),
                             background=False)
        a = s.begin_txn("query-a", 0)
        s.append(ids([1, 2, 3], nullable=False), txn_id=a)
        b = s.begin_txn("query-b", 0)
        s.append(ids([10, 11], nullable=True), txn_id=b)
        c = s.begin_txn("query-c", 0)
        s.append(ids([20], nullable=True), txn_id=c)
        s.flush()
        s.commit_txn("query-a", 0, [("p-0", a)])
        s.commit_txn("query-b", 0, [("p-0", b)])
        s.maintain()
        """,
        root=str(tmp_path),
    )
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert all_ids(store) == [1, 2, 3, 10, 11]
        assert store.recovery is not None and store.recovery.pending_txns == 1
        assert store.writer is not None
        [(c, app, _, _)] = store.writer.pending_txns()
        assert app == "query-c"
        store.commit_txn("query-c", 0, [("p-0", c)])
        store.maintain()
        store.finalize()
        assert all_ids(store) == [1, 2, 3, 10, 11, 20]


def test_committed_transaction_larger_than_the_target_size_reopens(tmp_path: Path) -> None:
    """A task's transaction of several target sizes, its worker dead before sealing,
    then the driver's decision: the partition opens and seals it, once."""
    run_child(
        """
        cfg = StoreConfig(segment=SegmentConfig(target_size_bytes=64 * 1024, max_open_duration_s=60))
        s = QuiverStore.open(root, cfg, background=False)
        t = s.begin_txn("query", 7)
        for i in range(20):
            s.append(ids(list(range(i * 5000, (i + 1) * 5000)), nullable=True), txn_id=t)
        s.flush()
        """,
        root=str(tmp_path),
    )
    cfg = StoreConfig(segment=SegmentConfig(target_size_bytes=64 * 1024, max_open_duration_s=60))
    with QuiverStore.open(str(tmp_path), cfg, partition=None, background=False) as driver:
        assert driver.commit_txn("query", 7, [("p-0", 1)])
        # the driver's post-commit sealing of idle partitions
        assert [p for p, _ in driver.finalize_idle_partitions()] == ["p-0"]
        assert all_ids(driver) == list(range(100_000))
        metas = driver.segments("p-0")
        assert len(metas) > 1  # sealed at the target size, not as one huge segment
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        assert all_ids(store) == list(range(100_000))


def test_wal_file_pinned_with_a_covered_marker_is_resolved_by_its_decision(
    tmp_path: Path,
) -> None:
    """A WAL written by an older writer may hold data records whose REC_TXN marker a
    segment already covers: recovery resolves them by the marker's decision."""
    cfg = CFG
    with QuiverStore.open(str(tmp_path), cfg, background=False) as s:
        t = s.begin_txn("q", 1)
        s.append(ids([5, 6], nullable=True), txn_id=t)
        s.flush()
        s.commit_txn("q", 1, [("p-0", t)])
        w = s.writer
        assert w is not None
        # an older writer covered the marker alone; its data stayed in the WAL only
        w.sealing.resolve = lambda: None  # type: ignore[method-assign]
        w.ledger.cover(t, t)
        w.rows.pending.clear()
        w.sealing.write_state(None)
        w.wal.flush()
        w.wal.close()
        w._flock.release()
        w.life.close()
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        store.finalize()
        assert all_ids(store) == [5, 6]


def test_segment_seqs_survive_the_loss_of_the_wal_path(tmp_path: Path) -> None:
    root, wal = tmp_path / "root", tmp_path / "local-wal"
    cfg = StoreConfig(
        wal=WalConfig(path=str(wal)), segment=SegmentConfig(max_open_duration_s=60)
    )
    with QuiverStore.open(str(root), cfg, background=False) as s:
        s.subscribers.register("reader")
        for i in range(3):
            s.append(ids([i], nullable=True))
            s.finalize()
        s.subscribers.record("reader", "p-0", [1, 2, 3], Outcome.ACK)
        assert s.run_retention().deleted == {"p-0": [1, 2, 3]}
        assert s.segments() == []
    shutil.rmtree(wal)  # the executor's local disk is gone
    with QuiverStore.open(str(root), cfg, background=False) as s:
        s.append(ids([100], nullable=True))
        meta = s.finalize()
        assert meta is not None and meta.seq == 4
        s.run_retention()
        assert all_ids(s) == [100]
        assert s.subscribers.pending("reader", "p-0", [4]) == [4]


def test_interrupted_finalize_reuses_its_never_published_seq(tmp_path: Path) -> None:
    """Seqs have no gaps: a reader can tell a missing published seq from one never
    published."""
    with QuiverStore.open(str(tmp_path), CFG, background=False) as s:
        s.append(ids([1], nullable=True))
        s.finalize()
    orphan = tmp_path / "segments" / "p-0" / f"{2:020d}.arrow"
    orphan.write_bytes(b"an interrupted finalize")
    with QuiverStore.open(str(tmp_path), CFG, background=False) as s:
        assert not orphan.exists()
        s.append(ids([2], nullable=True))
        meta = s.finalize()
        assert meta is not None and meta.seq == 2
        assert all_ids(s) == [1, 2]


def test_a_segment_retention_deleted_does_not_come_back(tmp_path: Path) -> None:
    """Retention died between unlinking the .meta and the .arrow while STATE still
    names the segment as publishing (its writer died right after publishing)."""
    run_child(
        """
        s = QuiverStore.open(root, StoreConfig(segment=SegmentConfig(max_open_duration_s=60)),
                             background=False)
        s.subscribers.register("reader")
        s.append(ids([1, 2], nullable=True))
        s.finalize()        # STATE still names seq 1 as publishing
        """,
        root=str(tmp_path),
    )
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as h:
        h.subscribers.record("reader", "p-0", [1], Outcome.ACK)
        h.subscribers.condemn({"p-0": [1]})  # retention's durable decision ...
        (tmp_path / "segments" / "p-0" / f"{1:020d}.meta").unlink()  # ... and its first unlink
    with QuiverStore.open(str(tmp_path), CFG, background=False) as s:
        assert s.segments() == []
        assert s.recovery is not None and s.recovery.republished_seq is None
        s.append(ids([3], nullable=True))
        meta = s.finalize()
        assert meta is not None and meta.seq == 2


def test_a_writer_with_another_segments_path_is_refused(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path / "root"), CFG, background=False) as s:
        s.append(ids([1], nullable=True))
    other = StoreConfig(segment=SegmentConfig(path=str(tmp_path / "elsewhere")))
    with pytest.raises(ConfigError, match=r"option segment\.path=") as err:
        QuiverStore.open(str(tmp_path / "root"), other, background=False)
    assert "elsewhere" in str(err.value) and str(tmp_path / "root" / "segments") in str(err.value)
    same = StoreConfig(segment=SegmentConfig(path="file://" + str(tmp_path / "root" / "segments")))
    with QuiverStore.open(str(tmp_path / "root"), same, background=False) as s:
        assert all_ids(s) == [1]


def test_a_batch_larger_than_the_wal_cap_fails_at_once(tmp_path: Path) -> None:
    cfg = StoreConfig(
        wal=WalConfig(max_size_bytes=64 * 1024),
        retention=RetentionConfig(backpressure_timeout_s=300),
        segment=SegmentConfig(max_open_duration_s=60),
    )
    with QuiverStore.open(str(tmp_path), cfg, background=False) as s:
        s.append(ids([0], nullable=True))
        with pytest.raises(BatchTooLargeError, match=r"wal\.max_size") as err:
            s.append(ids(list(range(20_000)), nullable=True))
        assert "160000 bytes" in str(err.value)
        s.flush()
        assert all_ids(s) == [0]


def test_append_succeeds_once_written_even_if_its_finalize_fails(tmp_path: Path) -> None:
    cfg = StoreConfig(segment=SegmentConfig(target_size_bytes=1024, max_open_duration_s=60))
    with QuiverStore.open(str(tmp_path), cfg, background=False) as s:
        w = s.writer
        assert w is not None
        real = s.segment_location.write_data
        calls = {"n": 0}

        def failing(*a: object, **k: object) -> object:
            calls["n"] += 1
            raise OSError(28, "No space left on device")

        s.segment_location.write_data = failing  # type: ignore[method-assign]
        s.append(ids(list(range(500)), nullable=True))  # past the target: finalize fails
        assert calls["n"] == 1 and w.maintenance_error is not None
        assert "No space" in (w.status()["maintenance_error"] or "")
        s.flush()
        s.segment_location.write_data = real  # type: ignore[method-assign]
        s.maintain()  # retried: the data is sealed once
        assert w.maintenance_error is None
        assert all_ids(s) == list(range(500))
    with QuiverStore.open(str(tmp_path), cfg, background=False) as s:
        assert all_ids(s) == list(range(500))


def test_a_damaged_meta_in_one_partition_stops_no_writer_nor_retention(tmp_path: Path) -> None:
    from tests.damage import flip_byte

    with QuiverStore.open(str(tmp_path), CFG, partition="p-0", background=False) as s:
        s.subscribers.register("reader")
        for i in range(3):
            s.append(ids([i], nullable=True))
            s.finalize()
    flip_byte(tmp_path / "segments" / "p-0" / f"{2:020d}.meta", 20)
    with QuiverStore.open(str(tmp_path), CFG, partition="p-1", background=False) as s:
        s.append(ids([100], nullable=True))
        assert s.finalize() is not None  # retention after it does not raise
        assert s.maintenance_error is None
        # all acknowledged: the pass chooses the damaged one too, and keeps it
        s.subscribers.record("reader", "p-0", [1, 2, 3], Outcome.ACK)
        result = s.run_retention()
        assert [(d.partition, d.seq) for d in result.damaged] == [("p-0", 2)]
        assert result.deleted == {"p-0": [1, 3]}
        assert (tmp_path / "metrics" / "writer-p-1.prom").exists()
    with QuiverStore.open(str(tmp_path), CFG, partition="p-0", background=False) as s:
        s.append(ids([200], nullable=True))
        meta = s.finalize()
        assert meta is not None and meta.seq == 4


def test_a_deleted_wal_file_between_two_kept_ones_is_not_damage(tmp_path: Path) -> None:
    """An undecided transaction keeps the first WAL file; a later file whose records
    are all sealed is deleted; the partition still opens after a crash."""
    run_child(
        """
        cfg = StoreConfig(wal=WalConfig(file_size_bytes=4096),
                          segment=SegmentConfig(max_open_duration_s=60))
        s = QuiverStore.open(root, cfg, background=False)
        t = s.begin_txn("abandoned", 0)
        s.append(ids([1], nullable=True), txn_id=t)
        s.append(ids(list(range(100, 1100)), nullable=True))   # a file of its own
        s.flush()
        s.finalize()                                             # seals it; its file goes
        s.append(ids([2000], nullable=True))
        s.flush()
        """,
        root=str(tmp_path),
    )
    wal = sorted(os.listdir(tmp_path / "partitions" / "p-0" / "wal"))
    assert wal[0] == f"{1:020d}.wal" and len(wal) >= 2  # first kept, a middle one gone
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert all_ids(store) == [*range(100, 1100), 2000]
        assert store.recovery is not None and store.recovery.pending_txns == 1


def test_a_discarded_transaction_whose_marker_file_was_deleted_does_not_wedge(
    tmp_path: Path,
) -> None:
    """A losing transaction's marker sits in a WAL file deleted as unneeded, its data
    in a later file kept by another undecided transaction: recovery must not take the
    data records for damage (found by the generative state-space test)."""
    run_child(
        """
        cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=60))
        s = QuiverStore.open(root, cfg, background=False)
        a = s.begin_txn("abandoned", 0)
        s.append(ids([1], nullable=True), txn_id=a)
        s.append(ids([2], nullable=True)); s.finalize()          # rotates: file 1 kept by a
        b = s.begin_txn("loser", 0)
        s.append(ids([3], nullable=True)); s.finalize()          # b's marker in its own file
        s.append(ids([4], nullable=True), txn_id=b)
        c = s.begin_txn("pending", 0)                            # keeps b's data file
        s.flush()
        s.commit_txn("loser", 0, [])                             # b loses
        s.maintain()                                             # b discarded
        s.append(ids([5], nullable=True)); s.finalize()          # its marker's file goes
        s.append(ids([6], nullable=True)); s.flush()
        """,
        root=str(tmp_path),
    )
    with QuiverStore.open(str(tmp_path), CFG, background=False) as store:
        assert all_ids(store) == [2, 3, 5, 6]
        assert store.recovery is not None and store.recovery.pending_txns == 2


def test_a_batch_larger_than_the_wal_cap_fails_at_once_even_when_throttled(
    tmp_path: Path,
) -> None:
    """Under a size cap that throttles intake, a batch that can never fit is refused as
    not retryable at once, not after waiting for capacity as retryable (found by the
    generative state-space test)."""
    from quiver_spark.config import SizeCapPolicy

    cfg = StoreConfig(
        wal=WalConfig(max_size_bytes=64 * 1024),
        retention=RetentionConfig(
            size_cap_bytes=1024,
            size_cap_policy=SizeCapPolicy.BACKPRESSURE,
            backpressure_timeout_s=0.05,
        ),
        segment=SegmentConfig(max_open_duration_s=60),
    )
    with QuiverStore.open(str(tmp_path), cfg, background=False) as s:
        s.subscribers.register("reader")  # pins everything: the cap throttles
        s.append(ids(list(range(500)), nullable=True))
        s.finalize()
        assert s.run_retention().throttle
        with pytest.raises(BatchTooLargeError, match=r"wal\.max_size"):
            s.append(ids(list(range(20_000)), nullable=True))
