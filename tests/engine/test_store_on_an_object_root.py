"""A store whose root is an object store (here the in-process ``memory://`` one):
the writer, a read handle, a subscriber and retention work exactly as on a local
root, with nothing but the WAL on local disk (ARCHITECTURE.md §2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import LockedError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from tests.stores import id_batch, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def keys(store: MemoryObjects) -> list[str]:
    return [o.key for o in store.list("")]


def test_rows_written_through_an_object_root_are_read_by_another_handle(tmp_path: Path) -> None:
    cfg = wal_in(tmp_path / "wal")
    with QuiverStore.open("memory://bkt/s", cfg, partition="p-0", background=False) as w:
        w.append(id_batch(0, 10))
        w.flush()
        assert w.finalize() is not None
        w.append(id_batch(10, 5))
        assert w.finalize() is not None
    with QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False) as r:
        got = sorted(x for b in r.scan() for x in b.column("id").to_pylist())
        assert got == list(range(15))
        assert [m.seq for m in r.segments("p-0")] == [1, 2]
    held = keys(MemoryObjects("bkt", "s"))
    assert "STORE" in held
    assert any(k.startswith("segments/p-0/") and k.endswith(".arrow") for k in held)


def test_an_object_root_creates_no_local_directory_but_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    wal = tmp_path / "wal"
    with QuiverStore.open("memory://bkt/s", wal_in(wal), partition="p-0", background=False) as w:
        w.append(id_batch(0, 3))
        w.finalize()
    assert sorted(os.listdir(tmp_path)) == ["wal"]


def test_a_subscriber_on_an_object_root_reads_acks_and_retention_reclaims(tmp_path: Path) -> None:
    cfg = wal_in(tmp_path / "wal")
    with QuiverStore.open("memory://bkt/s", cfg, partition="p-0", background=False) as w:
        with Subscription(
            QuiverStore.open("memory://bkt/s", cfg, partition=None), "fwd", owns_store=True
        ) as sub:
            sub.start("earliest")
            w.append(id_batch(0, 4))
            w.finalize()
            w.append(id_batch(4, 4))
            w.finalize()
            batch = sub.poll()
            assert batch is not None
            rows = [
                x for m in batch.segments for b in sub.read(m) for x in b.column("id").to_pylist()
            ]
            assert sorted(rows) == list(range(8))
            sub.ack(batch.end)
            w.run_retention()
    left = [k for k in keys(MemoryObjects("bkt", "s")) if k.startswith("segments/p-0/")]
    assert not [k for k in left if k.endswith(".arrow")], left


def test_a_batch_is_decided_once_on_an_object_root(tmp_path: Path) -> None:
    cfg = wal_in(tmp_path / "wal")
    with QuiverStore.open("memory://bkt/s", cfg, partition="p-0", background=False) as w:
        txn = w.begin_txn("app", 7)
        w.append(id_batch(0, 3), txn_id=txn)
        w.flush()
        assert w.commit_txn("app", 7, [("p-0", txn)], rows=3) is True
        with QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False) as other:
            assert other.commit_txn("app", 7, [("p-0", txn)], rows=3) is False  # decided
            assert other.commit_txn("app", 7, [("p-0", 99)], rows=3) is False  # not twice
        w.finalize()
    with QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False) as r:
        assert sorted(x for b in r.scan() for x in b.column("id").to_pylist()) == [0, 1, 2]


def test_a_second_writer_of_a_partition_on_an_object_root_is_refused(tmp_path: Path) -> None:
    cfg = wal_in(tmp_path / "wal")
    with QuiverStore.open("memory://bkt/s", cfg, partition="p-0", background=False):
        with pytest.raises(LockedError):
            QuiverStore.open("memory://bkt/s", wal_in(tmp_path / "wal2"), partition="p-0")
