"""A writing job's batch is decided once, by the engine (ARCHITECTURE.md §10): its one
commit record names the winners, a replay changes nothing, a batch without winners is
not recorded (a rerun of its id decides it), the rerun of a batch an operator discarded
is refused, and a query's first batch committed in a store that holds none of its
earlier ones is reported once per process. No JVM: the Spark sink only calls this."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.config import SegmentConfig, StoreConfig
from quiver_spark.errors import QuiverError
from tests.stores import HAND_SEALED, posix_commit_log


def _written(store: QuiverStore, app: str, version: int, ids: list[int]) -> tuple[str, int]:
    """A task's transaction of ``ids``, durable in ``store``'s open partition."""
    txn = store.begin_txn(app, version, "0")
    store.append(pa.record_batch({"id": pa.array(ids, pa.int64())}), txn_id=txn)
    store.flush()
    assert store.writer is not None
    return store.writer.pid, txn


def _app() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"  # the earlier-batch look is once per app and process


def test_a_batch_is_decided_once_and_its_replay_changes_nothing(tmp_path: Path) -> None:
    root, app = str(tmp_path / "s"), _app()
    with QuiverStore.open(root, HAND_SEALED, partition="p-0", background=False) as store:
        winner = _written(store, app, 0, [1, 2, 3])
        sid = store.store_id
        first = QuiverStore.commit_batch(root, HAND_SEALED, app, 0, [winner], 3, store_id=sid)
        again = QuiverStore.commit_batch(root, HAND_SEALED, app, 0, [winner], 3, store_id=sid)
        assert (first.fresh, again.fresh) == (True, False)
        assert first.seal_error is None and first.sealed == []  # the slot's writer lives
    with QuiverStore.open(root, partition=None, create=False) as r:
        assert sorted(x for b in r.scan() for x in b.column("id").to_pylist()) == [1, 2, 3]
    record = posix_commit_log(root).get(app, 0)
    assert record is not None and record.winners == frozenset({winner}) and record.store == sid


def test_a_batch_without_winners_is_not_recorded(tmp_path: Path) -> None:
    root, app = str(tmp_path / "s"), _app()
    sid = QuiverStore.prepare_writes(root, HAND_SEALED, pa.schema([("id", pa.int64())]))
    done = QuiverStore.commit_batch(root, HAND_SEALED, app, 4, [], 0, store_id=sid)
    assert not done.fresh
    assert posix_commit_log(root).get(app, 4) is None


def test_the_rerun_of_a_discarded_batch_is_refused(tmp_path: Path) -> None:
    root, app = str(tmp_path / "s"), _app()
    with QuiverStore.open(root, HAND_SEALED, partition="p-0", background=False) as store:
        sid = store.store_id
        assert QuiverStore.discard_batch(root, app, 2, store_id=sid)
        winner = _written(store, app, 2, [7])
        with pytest.raises(QuiverError, match=f"batch 2 of query {app} was discarded earlier"):
            QuiverStore.commit_batch(root, HAND_SEALED, app, 2, [winner], 1, store_id=sid)


def test_a_first_commit_meeting_no_earlier_batch_is_reported_once(tmp_path: Path) -> None:
    root, app, known = str(tmp_path / "s"), _app(), _app()
    with QuiverStore.open(root, HAND_SEALED, partition="p-0", background=False) as store:
        sid = store.store_id
        done = [
            QuiverStore.commit_batch(
                root, HAND_SEALED, app, v, [_written(store, app, v, [v])], 1, store_id=sid
            )
            for v in (5, 6)
        ]
        assert [d.without_earlier for d in done] == [True, False]
        for v in (0, 1):  # from its first batch on: nothing to report
            d = QuiverStore.commit_batch(
                root, HAND_SEALED, known, v, [_written(store, known, v, [v])], 1, store_id=sid
            )
            assert not d.without_earlier


def test_a_writing_job_is_refused_an_event_time_column_without_order(tmp_path: Path) -> None:
    config = StoreConfig(segment=SegmentConfig(event_time_column="name"))
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(QuiverError, match="a timestamp, date or integer column: id"):
        QuiverStore.prepare_writes(str(tmp_path / "s"), config, schema)
    assert not (tmp_path / "s").exists()  # refused before anything is created
