"""A commit decision reported to the committer survives a power loss.

``commit_txn`` writes the record to a temporary file, links it to its final name and
fsyncs the directory. When that directory fsync fails the call raises, and the
committer (a rerun Spark batch, a retry loop, a new process) commits again: the name
is in the page cache, so the second call finds it and answers "already decided".
From then on the committer counts the transaction as committed (Spark records the
batch done and never reruns it), so the name must be durable by the time any call
reports the decision: after a power loss the transaction's rows are readable.
"""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from tests.child import run_python
from tests.faults import CrashSimulator
from tests.stores import FLUSHED_BY_CALLER, id_batch, reopened_ids, scanned_ids, traced_new_store


@pytest.mark.parametrize("failed_op", ["fsync_dir", "unlink"])
def test_a_commit_retried_after_a_failed_directory_fsync_survives_power_loss(
    tmp_path: Path, failed_op: str
) -> None:
    """``unlink``: removing the temporary name failed, before the directory fsync."""
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    txn = store.begin_txn("app", 7)
    store.append(id_batch(100), txn_id=txn)
    store.flush()
    io.fail(failed_op, 1, errno.EIO, path_contains=f"{os.sep}commits{os.sep}app")
    with pytest.raises(OSError):
        store.commit_txn("app", 7, [("p-0", txn)])
    store.commit_txn("app", 7, [("p-0", txn)])  # "already decided": the batch is done
    power = sim.power_loss_at_end(io.trace)
    store.close()
    target = power.materialize(tmp_path / "after-power-loss")
    assert reopened_ids(target, FLUSHED_BY_CALLER, maintain=True) == [100, 101, 102]


def _power_loss_rows(sim: CrashSimulator, trace: list, target: Path) -> list[int]:
    """The rows a store holds after a power loss at the end of ``trace``."""
    target = sim.power_loss_at_end(trace).materialize(target)
    return reopened_ids(target, FLUSHED_BY_CALLER, maintain=True)


def test_a_retry_whose_directory_fsync_fails_again_reports_nothing_until_one_succeeds(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    txn = store.begin_txn("app", 7)
    store.append(id_batch(100), txn_id=txn)
    store.flush()
    app_dir = f"{os.sep}commits{os.sep}app"
    io.fail("fsync_dir", 1, errno.EIO, sticky=True, sticky_for=2, path_contains=app_dir)
    with pytest.raises(OSError):
        store.commit_txn("app", 7, [("p-0", txn)])
    with pytest.raises(OSError, match="commit decision app/7 exists but could not be made"):
        store.commit_txn("app", 7, [("p-0", txn)])
    # the committer's own decision, recognised by its retry once it is durable
    assert store.commit_txn("app", 7, [("p-0", txn)]) is True
    trace = list(io.trace)
    store.close()
    assert _power_loss_rows(sim, trace, tmp_path / "after") == [100, 101, 102]


def test_a_writer_seals_a_decided_transaction_only_once_its_decision_is_durable(
    tmp_path: Path,
) -> None:
    """A segment holding a transaction's rows outlives a power loss only with its decision:
    rows visible without one would be written again by the batch's rerun."""
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    txn = store.begin_txn("app", 7)
    store.append(id_batch(100), txn_id=txn)
    store.flush()
    io.fail("fsync_dir", 1, errno.EIO, path_contains=f"{os.sep}commits{os.sep}app")
    with pytest.raises(OSError):
        store.commit_txn("app", 7, [("p-0", txn)])
    store.writer.maintain()  # resolves the transaction from the name it finds
    store.finalize()
    trace = list(io.trace)
    store.close()
    target = sim.power_loss_at_end(trace).materialize(tmp_path / "after")
    with QuiverStore.open(target, FLUSHED_BY_CALLER, background=False) as again:
        decided = again.commits.get("app", 7)
        ids = scanned_ids(again)
    assert decided is not None and decided.winners == frozenset({("p-0", txn)})
    assert ids == [100, 101, 102]


_FAILED_COMMITTER = """
import errno, os, pickle
import pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.faults import FaultyIO
cfg = StoreConfig(
    wal=WalConfig(flush_interval_s=3600), segment=SegmentConfig(max_open_duration_s=3600)
)
io = FaultyIO(record_data=True)
store = QuiverStore.open(root, cfg, io=io, background=False)
txn = store.begin_txn("app", 7)
store.append(pa.record_batch({"id": pa.array([100, 101, 102], type=pa.int64())}), txn_id=txn)
store.flush()
io.fail("fsync_dir", 1, errno.EIO, path_contains=os.sep + "commits" + os.sep + "app")
try:
    store.commit_txn("app", 7, [("p-0", txn)])
except OSError:
    pass
else:
    raise SystemExit("the commit was expected to fail")
store.writer.close(finalize=False)
with open(out, "wb") as f:
    pickle.dump((txn, io.trace), f)
"""

_NEW_COMMITTER = """
import pickle
from quiver_spark import QuiverStore
from tests.faults import FaultyIO
io = FaultyIO(record_data=True)
with QuiverStore.open(root, partition=None, create=False, io=io, background=False) as store:
    answer = store.commit_txn("app", 7, [("p-0", txn)])
with open(out, "wb") as f:
    pickle.dump((answer, io.trace), f)
"""


def test_a_new_process_told_already_decided_finds_the_decision_after_power_loss(
    tmp_path: Path,
) -> None:
    """The failed committer's process is gone; the page cache still holds the name."""
    root = str(tmp_path / "s")
    QuiverStore.open(root, FLUSHED_BY_CALLER, background=False).close()
    sim = CrashSimulator.snapshot(root)
    first, second = str(tmp_path / "first.pickle"), str(tmp_path / "second.pickle")
    run_python(_FAILED_COMMITTER, root=root, out=first)
    with open(first, "rb") as f:
        txn, trace = pickle.load(f)
    run_python(_NEW_COMMITTER, root=root, out=second, txn=txn)
    with open(second, "rb") as f:
        answer, trace2 = pickle.load(f)
    assert answer is False  # "already decided": the driver counts the batch as done
    assert _power_loss_rows(sim, trace + trace2, tmp_path / "after") == [100, 101, 102]
