"""Stores filled through the engine for tests, and the rows read back from them:
finalized segments of consecutive integers, batches of an ``id`` column, the ids a
store holds (in an open handle, or reopened from its directory); and the kinds of root
a hypothesis state machine runs on (:class:`ModelRoot`)."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.commits import CommitLog
from quiver_spark.control import lease
from quiver_spark.control.clock import elapsed
from quiver_spark.errors import LeaseLostError
from quiver_spark.fs import DEFAULT_IO, FileIO
from quiver_spark.objects import ObjectStore, Stored, memory
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.roots import open_objects
from quiver_spark.retained import RetainedIndex
from quiver_spark.root_kind import FileRoot, root_kind
from quiver_spark.segment import SegmentMeta
from quiver_spark.subscribers import SubscriberRegistry
from quiver_spark.subscription import Subscription
from tests.faults import CrashSimulator, FaultyIO

HAND_SEALED = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
"""Segments are finalized by the test, never by age."""

SYNC_EACH = StoreConfig(
    wal=WalConfig(flush_interval_s=0), segment=SegmentConfig(max_open_duration_s=3600)
)
"""Every append is fsynced before it returns; segments are finalized by the test."""

FLUSHED_BY_CALLER = StoreConfig(
    wal=WalConfig(flush_interval_s=3600), segment=SegmentConfig(max_open_duration_s=3600)
)
"""The WAL is fsynced by the caller's ``flush`` only; segments are finalized by the test."""


def wal_in(wal: str | Path, **sections: Any) -> StoreConfig:
    """The WAL in the local directory ``wal`` (all an object root keeps on local disk;
    a handle per host has its own), every append fsynced before it returns; segments
    are finalized by the test. ``sections`` sets the others (``retention=...``)."""
    return StoreConfig(
        wal=WalConfig(path=str(wal), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
        **sections,
    )


def counted_opens(monkeypatch: pytest.MonkeyPatch, wrap: Callable[[Any], Any]) -> list[Any]:
    """Every ``ObjectStore`` a ``QuiverStore`` opens from now on, wrapped by ``wrap`` (a
    counting store) and listed in the order opened."""
    import quiver_spark.store as store_module

    made: list[Any] = []
    real = store_module.open_objects

    def opened(*args: Any, **kwargs: Any) -> Any:
        made.append(wrap(real(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(store_module, "open_objects", opened)
    return made


class KeptGets(CountingObjects):
    """Counts requests as :class:`CountingObjects` does, and keeps the key of every GET
    in the order asked."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gets: list[str] = []

    def get(self, key: str) -> Stored | None:
        self.gets.append(key)
        return super().get(key)

    def ending(self, suffix: str) -> list[str]:
        """The keys asked for that end with ``suffix``."""
        return [k for k in self.gets if k.endswith(suffix)]


def int_segments(
    root: str | Path,
    segments: Iterable[tuple[int, int]],
    *,
    partition: str = "p-0",
    column: str = "k",
    config: StoreConfig = HAND_SEALED,
) -> list[SegmentMeta]:
    """One finalized segment of ``partition`` per ``(lo, n)``: an int64 ``column``
    holding ``lo .. lo + n - 1``. Returns their metadata in order."""
    metas = []
    with QuiverStore.open(str(root), config, partition=partition, background=False) as store:
        for lo, n in segments:
            store.append(pa.record_batch({column: pa.array(range(lo, lo + n), type=pa.int64())}))
            meta = store.finalize()
            assert meta is not None
            metas.append(meta)
    return metas


def publish(store: QuiverStore, n: int = 1) -> None:
    """Append three rows and finalize, ``n`` times, through an open writer: ``n`` new
    segments of its partition."""
    for _ in range(n):
        store.append(pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())}))
        store.finalize()


@contextmanager
def writer_and_two_retention_handles(
    root: str | Path, config: StoreConfig = HAND_SEALED
) -> Iterator[tuple[QuiverStore, QuiverStore]]:
    """Two store-wide handles ``a`` and ``b`` beside an open writer of ``p-0`` that
    published segments 1, 2 and 3. Subscriber ``s`` is registered; ``a``'s retained
    index never resurveys by itself and its first retention pass surveyed 1, 2, 3."""
    root = str(root)
    with (
        QuiverStore.open(root, config, partition="p-0", background=False) as w,
        QuiverStore.open(root, config, partition=None, background=False) as a,
        QuiverStore.open(root, config, partition=None, background=False) as b,
    ):
        a._retention.index = RetainedIndex(clock=lambda: 0.0)  # no periodic resurvey in the test
        a.subscribers.register("s")
        publish(w, 3)
        assert a.run_retention().deleted == {}  # a's first pass surveys: sees 1, 2, 3
        yield a, b


@contextmanager
def passes_by_w0_only(
    root: str, config: StoreConfig, subscriber: str
) -> Iterator[tuple[Subscription, QuiverStore]]:
    """``subscriber`` started at the earliest, its acknowledgements running no retention
    pass, and the writer of partition ``w-0`` after its first pass: every pass from here
    on is one the test runs on that writer."""
    with (
        Subscription.open(root, subscriber, config=config) as sub,
        QuiverStore.open(root, config, partition="w-0", background=False) as w,
    ):
        sub._retention_after_ack = lambda: 0  # type: ignore[method-assign]
        sub.start("earliest")
        w.run_retention()
        yield sub, w


def id_batch(lo: int, n: int = 3) -> pa.RecordBatch:
    """An int64 ``id`` column holding ``lo .. lo + n - 1``."""
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def scanned_ids(store: QuiverStore) -> list[int]:
    """Every ``id`` a scan of ``store`` returns, sorted (a row read twice is listed twice)."""
    return sorted(i for b in store.scan() for i in b.column("id").to_pylist())


def acked_ids(sub: Subscription) -> list[int]:
    """Every ``id`` ``sub`` polls from where it stands to the end, in the order read
    (a row read twice is listed twice); each batch is acknowledged once read."""
    seen: list[int] = []
    while (batch := sub.poll()) is not None:
        seen += [x for m in batch.segments for b in sub.read(m) for x in b.column("id").to_pylist()]
        sub.ack(batch.end)
    return seen


def reopened_ids(root: str | Path, config: StoreConfig, *, maintain: bool = False) -> list[int]:
    """Every ``id`` the store at ``root`` holds when opened again: its writer recovers,
    ticks once first when ``maintain``, then seals what it left open."""
    with QuiverStore.open(str(root), config, background=False) as store:
        if maintain:
            store.writer.maintain()
        store.finalize()
        return scanned_ids(store)


def traced_new_store(
    root: str | Path, config: StoreConfig
) -> tuple[QuiverStore, FaultyIO, CrashSimulator]:
    """A new store at ``root`` (created and closed), opened again through a
    ``FaultyIO(record_data=True)``, with a simulator of its durable state before that open."""
    root = str(root)
    QuiverStore.open(root, config, background=False).close()
    sim = CrashSimulator.snapshot(root)
    io = FaultyIO(record_data=True)
    return QuiverStore.open(root, config, io=io, background=False), io, sim


# -- writers on object roots whose lease moved ------------------------------------------
def taken_over_while_paused(
    zombie: QuiverStore, open_successor: Callable[[], QuiverStore]
) -> QuiverStore:
    """``zombie``'s process pauses (its writer lease is renewed no more) and a writer of
    another host, having watched that lease unchanged for longer than its ttl, takes the
    partition over: the store ``open_successor()`` opens there, at the next epoch."""
    held = zombie.writer.lease if zombie.writer is not None else None
    assert held is not None and held.keeper is not None
    held.keeper.stop()
    got = held.objects.get(held.key)
    assert got is not None
    lease._seen[(held.objects.url, held.key)] = lease._Seen(
        got.version, elapsed() - 10 * lease.DEFAULT_TTL_S, elapsed
    )
    other = lease._Identity("host-2", 5002, 1, "node-2")
    with mock.patch.object(lease, "_me", lambda: other):
        successor = open_successor()
    assert successor.writer is not None and successor.writer.lease is not None
    assert successor.writer.lease.epoch == held.epoch + 1
    return successor


def taken_over_after_publishing(root: str, tmp_path: Path) -> tuple[QuiverStore, QuiverStore]:
    """A writer of p-0 at ``root`` (its WAL in ``tmp_path / "wal-a"``) publishes rows
    0..2 then pauses; a writer of another host (its WAL in ``wal-b``), having watched
    its lease unchanged for longer than its ttl, takes the partition over. Returns
    (zombie, successor)."""
    zombie = QuiverStore.open(root, wal_in(tmp_path / "wal-a"), partition="p-0", background=False)
    zombie.append(id_batch(0, 3))
    zombie.flush()
    assert zombie.finalize() is not None
    successor = taken_over_while_paused(
        zombie,
        lambda: QuiverStore.open(
            root, wal_in(tmp_path / "wal-b"), partition="p-0", background=False
        ),
    )
    return zombie, successor


def fenced_finalize(zombie: QuiverStore, lo: int = 100) -> None:
    """The paused writer resumes: it appends rows ``lo .. lo + 2`` and its finalize is
    fenced (:class:`LeaseLostError`), after it created that segment's objects."""
    zombie.append(id_batch(lo, 3))
    zombie.flush()
    with pytest.raises(LeaseLostError):
        zombie.finalize()


def posix_commit_log(root: str, io: FileIO = DEFAULT_IO, store: str | None = None) -> CommitLog:
    """The commit records of the POSIX root ``root`` (through ``io``), as its kind
    builds them: every name found or made is fsynced before any answer."""
    return FileRoot.commit_log(root, LocalObjects(root, io), io, store)


# -- the kinds of root a generative model runs on -------------------------------------------
@dataclass(frozen=True)
class ModelRoot:
    """A kind of store root a hypothesis state machine runs on, made as the state-space
    machine's harnesses make theirs (``tests/engine/state_model.py``) and as the
    ``root`` fixtures of the tests parametrized by root do: a POSIX directory
    ``<base>/store``, or ``memory://<a bucket of its own>/s`` whose WALs are on local
    disk in ``<base>/local`` (its ``wal.path``: all an object root keeps on this
    machine). A model names its root as the state-space machine does (a subclass per
    root: ``class M(Model, root=MEMORY_ROOT)``), so every rule and invariant runs on
    both kinds."""

    name: str
    objects: bool

    def new(self, base: str | Path) -> str:
        """A root of this kind no other sequence uses, for one working in ``base``."""
        if self.objects:
            return f"memory://m-{uuid.uuid4().hex[:12]}/s"
        root = os.path.join(base, "store")
        os.makedirs(root, exist_ok=True)
        return root

    def config(self, config: StoreConfig, base: str | Path) -> StoreConfig:
        """``config`` with its WAL where this kind keeps it: in the root's own tree
        (POSIX), in ``<base>/local`` (an object root; never the user's cache)."""
        if not self.objects:
            return config
        wal = dataclasses.replace(config.wal, path=os.path.join(base, "local"))
        return dataclasses.replace(config, wal=wal)

    def forget(self, root: str) -> None:
        """What a sequence on ``root`` left in this process goes: its ``memory://``
        bucket and the lease versions watched there (a POSIX root's directory is the
        caller's to remove)."""
        if not self.objects:
            return
        bucket = root.removeprefix("memory://").split("/", 1)[0]
        for seen in [k for k in lease._seen if k[0].startswith(f"memory://{bucket}/")]:
            del lease._seen[seen]
        with memory._LOCK:
            memory._BUCKETS.pop(bucket, None)
            memory._MODIFIED.pop(bucket, None)


class OnRoot:
    """A state machine that runs on every kind of root: a subclass names its root
    (``class M(Model, root=MEMORY_ROOT)``), which the rules find as ``self.kind``."""

    kind: ClassVar[ModelRoot]

    def __init_subclass__(cls, root: ModelRoot | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if root is not None:
            cls.kind = root


POSIX_ROOT = ModelRoot("POSIX", objects=False)
MEMORY_ROOT = ModelRoot("memory", objects=True)


def open_registry_at(root: str, **kw: Any) -> SubscriberRegistry:
    """The subscriber registry (ack log) of ``root`` as its kind keeps it: files under
    ``subscribers/`` with their flock (POSIX), objects in the bucket (an object root).
    ``kw`` goes to :meth:`SubscriberRegistry.open` (``checkpoint_records``...)."""
    return SubscriberRegistry.open(
        root, objects=open_objects(root), journal=root_kind(root).journal, **kw
    )
