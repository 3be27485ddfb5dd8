"""``quiver txns``: pending transactions of abandoned batches, listed and discarded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import QuiverError
from quiver_spark.spark.sink import QuiverCommitMessage, QuiverStreamWriter

from .conftest import CFG, batch, run, run_json

APP = "3f1c2a9e-query"


def abandon_batches(root: Path, versions: list[int]) -> dict[int, int]:
    """A sink-like writer leaves one undecided transaction per batch and closes."""
    txns = {}
    with QuiverStore.open(str(root), CFG, partition="p-0", background=False) as store:
        store.append(batch(0, 10))  # committed data (not transactional) stays
        for v in versions:
            txns[v] = store.begin_txn(APP, v, "0.0.1")
            store.append(batch(1000 * (v + 1), 50), txn_id=txns[v])
        store.flush()
    return txns


def test_list_shows_each_pending_batch_from_the_closed_writers_heartbeat(tmp_path: Path) -> None:
    root = tmp_path / "store"
    txns = abandon_batches(root, [4, 5])
    doc = run_json(["txns", root, "list"])
    assert [(t["partition"], t["app"], t["version"], t["txn"]) for t in doc["pending"]] == [
        ("p-0", APP, 4, txns[4]),
        ("p-0", APP, 5, txns[5]),
    ]
    assert not any(t["decided"] or t["writer_live"] for t in doc["pending"])
    human = run(["txns", root, "list"])
    assert human.exit_code == 0 and APP in human.stdout and "undecided" in human.stdout


def test_discard_needs_yes_and_changes_nothing_without_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    abandon_batches(root, [4])
    res = run(["txns", root, "discard", APP])
    assert res.exit_code != 0 and "--yes" in res.output
    assert len(run_json(["txns", root, "list"])["pending"]) == 1
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        assert store.commits.get(APP, 4) is None


def test_discard_drops_the_rows_frees_the_wal_and_keeps_committed_data(tmp_path: Path) -> None:
    root = tmp_path / "store"
    abandon_batches(root, [4, 5])
    doc = run_json(["txns", root, "discard", APP, "--yes"])
    assert doc["versions"] == [4, 5] and doc["already_decided"] == []
    assert run_json(["txns", root, "list"])["pending"] == []
    status = run_json(["status", root])
    (p0,) = status["partitions"]
    assert p0["pending_txns"] == 0 and p0["wal_bytes"] == 0
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        ids = [i for b in store.scan() for i in b.column("id").to_pylist()]
    assert ids == list(range(10)), "only the non-transactional rows remain"
    again = run_json(["txns", root, "discard", APP, "--yes"])
    assert again["versions"] == [] and again["already_decided"] == []


def test_discard_refuses_a_bad_app_id(tmp_path: Path) -> None:
    root = tmp_path / "store"
    abandon_batches(root, [1])
    res = run(["txns", root, "discard", "../etc", "--yes"])
    assert res.exit_code == 2 and "invalid QUERY_ID" in res.output


def test_a_rerun_of_a_discarded_batch_fails_its_commit_loudly(tmp_path: Path) -> None:
    root = tmp_path / "store"
    abandon_batches(root, [4])
    run_json(["txns", root, "discard", APP, "--yes"])
    with QuiverStore.open(str(root), CFG, partition="p-0", background=False) as store:
        rerun = store.begin_txn(APP, 4, "0.1.9")
        store.append(batch(5000, 50), txn_id=rerun)
        store.flush()
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    writer = QuiverStreamWriter({"path": str(root)}, schema, False)
    with pytest.raises(QuiverError, match="discarded earlier"):
        writer.commit([QuiverCommitMessage(APP, 4, "p-0", rerun, 50, 0)], 4)
    with QuiverStore.open(str(root), CFG, partition="p-0", background=False) as store:
        decision = store.commits.get(APP, 4)
        assert decision is not None and decision.winners == frozenset()
        store.maintain()
        store.finalize()
        ids = [i for b in store.scan() for i in b.column("id").to_pylist()]
    assert ids == list(range(10)), "neither the discarded batch nor its rerun became visible"


def test_discard_refuses_the_transactions_of_a_live_writer(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with QuiverStore.open(str(root), CFG, partition="p-0", background=False) as store:
        txn = store.begin_txn(APP, 9, "0.0.1")  # the query is still running
        store.append(batch(0, 10), txn_id=txn)
        store.flush()
        store.writer.write_heartbeat()
        res = run(["txns", root, "discard", APP, "--yes"])
        assert res.exit_code == 1, res.output
        assert "p-0" in res.stderr and "live writer" in res.stderr
        assert f"pid {os.getpid()}" in res.stderr  # who holds the lock
        assert store.commits.get(APP, 9) is None, "nothing was decided"
    # once the writer is gone the same command discards it
    assert run_json(["txns", root, "discard", APP, "--yes"])["versions"] == [9]


def test_discard_of_an_unknown_query_id_fails_and_lists_the_known_ones(tmp_path: Path) -> None:
    root = tmp_path / "store"
    abandon_batches(root, [4])
    res = run(["txns", root, "discard", "3f1c2a9e-qeury", "--yes"])
    assert res.exit_code == 1
    assert "unknown query id '3f1c2a9e-qeury'" in res.stderr and APP in res.stderr
    assert len(run_json(["txns", root, "list"])["pending"]) == 1
