"""A commit record names the store whose committer wrote it (its STORE ``uuid``), and a
record written before records named their store still reads (ARCHITECTURE.md §10.1)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore
from quiver_spark import format as fmt
from quiver_spark.descriptor import read_descriptor
from quiver_spark.objects.local import LocalObjects

from ..stores import posix_commit_log


def test_a_decision_made_through_a_store_names_that_store(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, partition="p-0", background=False) as store:
        txn = store.begin_txn("q", 0)
        store.append(pa.record_batch({"k": pa.array([1], pa.int64())}), txn_id=txn)
        store.flush()
        assert store.commit_txn("q", 0, [("p-0", txn)], 1)
        sid = store.store_id
    objects = LocalObjects(root)
    assert sid == read_descriptor(objects)["uuid"] and sid
    decided = posix_commit_log(root).get("q", 0)
    assert decided is not None and decided.store == sid


def test_two_stores_have_two_ids(tmp_path: Path) -> None:
    ids = set()
    for name in ("a", "b"):
        with QuiverStore.open(str(tmp_path / name), partition=None) as store:
            ids.add(store.store_id)
    assert len(ids) == 2 and None not in ids


def test_a_record_written_before_records_named_their_store_still_reads(tmp_path: Path) -> None:
    objects = LocalObjects(str(tmp_path))
    body = {"app": "q", "version": 3, "winners": [["p-0", 5]], "committed_ns": time.time_ns()}
    objects.create(
        "commits/q/00000000000000000003.commit", fmt.encode_frame(fmt.MAGIC_COMMIT, body)
    )
    old = posix_commit_log(str(tmp_path)).get("q", 3)
    assert old is not None and old.store is None and old.winners == frozenset({("p-0", 5)})
    assert posix_commit_log(str(tmp_path), store="x").commit("q", 3, [("p-0", 5)], 0) is False, (
        "an existing decision is kept whoever asks again"
    )


def test_a_retried_decision_of_a_log_that_names_its_store_is_recognised_as_its_own(
    tmp_path: Path,
) -> None:
    log = posix_commit_log(str(tmp_path), store="s-1")
    assert log.commit("q", 0, [("p-0", 1)], 2) is True
    assert log.commit("q", 0, [("p-0", 1)], 2) is True
    fresh = posix_commit_log(str(tmp_path), store="s-1").get("q", 0)
    assert fresh is not None and fresh.store == "s-1"


def test_whether_a_query_has_an_earlier_record_costs_a_look_at_its_own_records(
    tmp_path: Path,
) -> None:
    log = posix_commit_log(str(tmp_path), store="s-1")
    assert not log.has_earlier("q", 0) and not log.has_earlier("q", 5)
    log.commit("q", 5, [("p-0", 1)], 1)
    assert not log.has_earlier("q", 5), "its own version is not an earlier one"
    assert log.has_earlier("q", 6)  # the previous version
    assert log.has_earlier("q", 9)  # found by the listing
    assert not log.has_earlier("other", 9)
