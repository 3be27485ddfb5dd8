"""Writing jobs: what the driver of a job that writes a store in parallel decides
around its tasks' transactions (ARCHITECTURE.md §10).

A writing job (a Spark sink's streaming query, or one ``df.write``) runs tasks that
each write one transaction ``(app, version)`` into a partition of their own, then
decides the batch with one commit record naming the winning transactions
(:class:`~quiver_spark.commits.CommitLog`). Here are the decisions around that, each
made once for every job: what is checked before any task writes, when a decided batch
is refused (its rerun after an operator discarded it), whether a query meets none of
its earlier batches in this store, and when to look for the committed data of
partitions whose writer is gone. :meth:`QuiverStore.prepare_writes`,
:meth:`QuiverStore.write_task` (one per task: its transaction written, flushed and
staged), :meth:`QuiverStore.commit_batch` and :meth:`QuiverStore.discard_batch` are the
calls a job makes; each runs the function of its name here (:func:`prepare_writes`,
:func:`write_task`, :func:`commit_batch`, :func:`discard_batch`, :func:`seal_orphans`),
handing it the store's opener.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa

from . import layout
from .commits import CommitLog
from .config import NAME_RE, StoreConfig
from .errors import (
    BatchDiscardedError,
    ConfigError,
    LeaseLostError,
    QuiverError,
    StoreClosedError,
    WalFailedError,
)
from .fs import DEFAULT_IO, partition_locked
from .objects import open_objects
from .option_table import SEGMENT_EVENT_TIME_COLUMN
from .root_kind import root_kind

log = logging.getLogger(__name__)

PATH = "path"

STAGED_PASS_PERIOD_S = 10.0
"""How often, at most, a driver's commits look for a lost machine's staged transactions
(one listing of ``partitions/``; a lost writer's lease must also be seen unchanged for
its ttl first, so the loss-to-readable time is the ttl plus at most this)."""


@dataclass(frozen=True)
class BatchCommit:
    """What deciding one batch of a writing job did (:meth:`QuiverStore.commit_batch`)."""

    fresh: bool
    """The recorded decision is this call's (False: decided earlier, e.g. a replay)."""
    without_earlier: bool = False
    """The first batch of its app this process committed in this store is not the app's
    first, and the store holds no commit of an earlier one (a query restarted from a
    checkpoint written against another store looks so; so does one whose earlier
    batches had no rows)."""
    sealed: list[tuple[str, int]] = field(default_factory=list)
    """``(partition, seq)`` of segments sealed from partitions whose writer is gone."""
    seal_error: BaseException | None = None
    """Why looking for such partitions failed (the decision stands; a later commit
    looks again)."""


@dataclass(frozen=True)
class TaskWrite:
    """What one task of a writing job wrote (:func:`write_task`): its transaction, which
    the job's commit names as a winner, or ``txn_id`` 0 (and no partition) when the task
    had no rows."""

    partition: str | None
    txn_id: int
    rows: int
    bytes: int


SLOT_LOST: tuple[type[BaseException], ...] = (WalFailedError, StoreClosedError, LeaseLostError)
"""The failures after which a task's store handle is of no more use to its process (a
lost lease, FencedError included, is never regained by the holder that lost it)."""


class TaskStore(Protocol):
    """What a task's step uses of the store handle it writes through (a
    :class:`~quiver_spark.store.QuiverStore` opened on a partition)."""

    @property
    def writing_partition(self) -> str | None: ...

    def begin_txn(self, app: str, version: int, tag: str = "") -> int: ...

    def append(self, batch: pa.RecordBatch, *, txn_id: int = 0) -> int: ...

    def flush(self) -> int: ...

    def stage_txn(self, txn_id: int) -> int: ...


class JobStore(Protocol):
    """What a writing job's steps use of a store handle they open (a
    :class:`~quiver_spark.store.QuiverStore`)."""

    wal_root: str

    @property
    def store_id(self) -> str | None: ...

    def ensure_schema(self, schema: pa.Schema) -> pa.Schema: ...

    def finalize_idle_partitions(
        self, *, local: bool = True, staged: bool = True
    ) -> list[tuple[str, int]]: ...

    def close(self) -> None: ...


class OpenStore(Protocol):
    """How a writing job's steps open a store (:meth:`QuiverStore.open`)."""

    def __call__(
        self,
        path: str,
        config: StoreConfig | None = None,
        *,
        partition: str | None = ...,
        create: bool = ...,
        storage_options: dict[str, Any] | None = None,
    ) -> JobStore: ...


def check_writer_root(root: str) -> None:
    """Refuse a writer's root that is an existing file, before anything is created."""
    root_kind(root).check_writer_root(root)


def check_event_time_column(config: StoreConfig, schema: pa.Schema) -> None:
    """Refuse a ``segment.event_time_column`` that ``schema`` lacks or that holds no
    timestamps, dates or integers (the segment statistics it gives are their order)."""
    col = config.segment.event_time_column
    if col is None:
        return
    ok = [
        f.name
        for f in schema
        if pa.types.is_timestamp(f.type) or pa.types.is_integer(f.type) or pa.types.is_date(f.type)
    ]
    if col not in ok:
        raise ConfigError(
            SEGMENT_EVENT_TIME_COLUMN, col, "a timestamp, date or integer column: " + ", ".join(ok)
        )


def decide_batch(
    commits: CommitLog,
    root: str,
    app: str,
    version: int,
    winners: Iterable[tuple[str, int]],
    rows: int,
) -> BatchCommit:
    """Record the decision of batch ``(app, version)`` (idempotent: an existing decision
    stands, so a replayed batch or a second call is a no-op).

    A batch decided earlier with no winners (discarded by an operator, ``quiver txns
    ... discard``) is refused: its rerun would either store its rows twice or drop them
    silently. Once per ``(root, app)`` and process, a fresh decision of a batch above 0
    looks whether the store holds an earlier batch of ``app`` (at most one HEAD and one
    listing, :meth:`CommitLog.has_earlier`)."""
    fresh = commits.commit(app, version, winners, rows)
    if not fresh and (earlier := commits.get(app, version)) is not None and not earlier.winners:
        raise BatchDiscardedError(app, version)
    return BatchCommit(fresh, without_earlier=_without_earlier(commits, root, app, version, fresh))


_HISTORY_SEEN: set[tuple[str, str]] = set()
"""The (root, app) pairs whose commits this process has looked at."""


def _without_earlier(commits: CommitLog, root: str, app: str, version: int, fresh: bool) -> bool:
    """Whether this first commit of ``app`` in this process meets none of its earlier
    batches; none is looked for when this process committed an earlier batch of it or
    the record was already there (a replay)."""
    key = (root, app)
    if key in _HISTORY_SEEN:
        return False
    _HISTORY_SEEN.add(key)
    if version == 0 or not fresh:
        return False
    try:
        return not commits.has_earlier(app, version)
    except (QuiverError, OSError) as e:  # it only informs
        log.debug("quiver.sink.history_unknown root=%s app=%s: %r", root, app, e)
        return False


# -- partitions whose writer is gone --------------------------------------------------------
_WAL_ROOTS: dict[tuple[str, str | None], str] = {}
"""The local WAL directory of each (root, ``wal.path``) this process committed to."""
_STAGED_PASSES: dict[tuple[str, str | None], float] = {}


@dataclass(frozen=True)
class OrphanLook:
    """Which halves of :meth:`QuiverStore.finalize_idle_partitions` a commit runs."""

    key: tuple[str, str | None]
    staged_due: bool
    """Object root: the staged transactions of lost machines are due a look."""
    now: float


def orphan_look(root: str, config: StoreConfig) -> OrphanLook | None:
    """What a commit to ``root`` looks for, or None when it asks nothing of the store:
    once the WAL directory of the root is known (from this process's first commit),
    a commit that finds no WAL with data and a free lock there, and whose look for
    staged transactions is not due (every :data:`STAGED_PASS_PERIOD_S`), opens nothing.

    Only the WALs on this machine can be sealed here, and a slot whose WAL lock a live
    writer holds is no orphan."""
    key = (root, config.wal.path)
    wal_root = _WAL_ROOTS.get(key)
    now = time.monotonic()
    staged_due = root_kind(root).staged_look_due(
        now - _STAGED_PASSES.get(key, -math.inf), STAGED_PASS_PERIOD_S
    )
    if wal_root is not None and not orphans_possible(wal_root) and not staged_due:
        return None
    return OrphanLook(key, staged_due, now)


def orphans_opened(look: OrphanLook, wal_root: str) -> bool:
    """Note that the store of ``look`` is open with its WALs at ``wal_root``; whether
    a WAL there may hold an orphan's committed data."""
    _WAL_ROOTS[look.key] = wal_root
    if look.staged_due:
        _STAGED_PASSES[look.key] = look.now
    return orphans_possible(wal_root)


def orphans_possible(wal_root: str) -> bool:
    """Whether ``wal_root`` holds a partition's WAL with files whose writer lock no
    live process holds (local probes only: a listing and a non-blocking ``flock``)."""
    try:
        pids = os.listdir(wal_root)
    except FileNotFoundError:
        return False
    for pid in pids:
        if not NAME_RE.fullmatch(pid):
            continue
        try:
            if not os.listdir(os.path.join(wal_root, layout.wal_dir(pid))):
                continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not partition_locked(os.path.join(wal_root, layout.partition_lock(pid))):
            return True
    return False


# -- the calls a job makes (:class:`QuiverStore`'s classmethods) ------------------------------
def write_task(
    slot: Callable[[], TaskStore],
    batches: Iterable[pa.RecordBatch],
    app: str,
    version: int,
    tag: str,
    *,
    lost: Callable[[BaseException], None],
) -> TaskWrite:
    """One task of batch ``(app, version)``: its rows as one transaction in the
    partition ``slot()`` opens (claimed at its first row: a task without rows claims
    none and writes nothing), flushed (durable: the task's acknowledgement) and, on an
    object root, staged in the bucket, so that no committed row lives on one machine
    only (§10.2). Returns what the job's commit names.

    A failure raises: the transaction was not reported, so it is never committed, and
    the retry of the task (or the next batch) writes its rows. After one of
    :data:`SLOT_LOST`, ``lost`` is told first, so the next task claims a slot afresh."""
    store: TaskStore | None = None
    txn = rows = nbytes = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if store is None:
                store = slot()
                txn = store.begin_txn(app=app, version=version, tag=tag)
            store.append(batch, txn_id=txn)
            rows += batch.num_rows
            nbytes += batch.nbytes
        if store is not None:
            store.flush()
            store.stage_txn(txn)  # nothing to do on a POSIX root
    except SLOT_LOST as e:
        lost(e)
        raise
    partition = store.writing_partition if store is not None else None
    return TaskWrite(partition, txn, rows, nbytes)


def prepare_writes(
    open_store: OpenStore,
    root: str,
    config: StoreConfig,
    schema: pa.Schema,
    *,
    storage_options: dict[str, Any] | None = None,
) -> str | None:
    """What a writing job checks once, before any of its tasks writes: the root
    is no file, ``segment.event_time_column`` is a timestamp, date or integer
    column of ``schema``, and the root (made if new) accepts ``config`` and
    ``schema`` (recorded by the first write; SchemaMismatchError names both).
    Returns the store's id, which the job's commit records name (§10.1)."""
    check_writer_root(root)
    check_event_time_column(config, schema)
    store = open_store(root, config, partition=None, storage_options=storage_options)
    try:
        store.ensure_schema(schema)
        return store.store_id
    finally:
        store.close()


def commit_batch(
    open_store: OpenStore,
    root: str,
    config: StoreConfig,
    app: str,
    version: int,
    winners: Sequence[tuple[str, int]],
    rows: int = 0,
    *,
    store_id: str | None,
    storage_options: dict[str, Any] | None = None,
) -> BatchCommit:
    """Durably decide batch ``(app, version)`` of a writing job: one commit record
    naming ``winners`` (:func:`decide_batch`: idempotent, a discarded batch's rerun
    refused), then seal the committed data of partitions whose writer is gone
    (:func:`seal_orphans`). A batch without winners is not recorded (so that a rerun
    of its batch id decides it) and seals nothing.

    Opens no store for the record: the root's objects only (one create)."""
    if not winners:
        return BatchCommit(fresh=False)
    objects = open_objects(root, storage_options or None)
    commits = root_kind(root).commit_log(root, objects, DEFAULT_IO, store_id)
    decided = decide_batch(commits, root, app, version, winners, rows)
    sealed, error = seal_orphans(open_store, root, config, storage_options)
    return replace(decided, sealed=sealed, seal_error=error)


def discard_batch(
    root: str,
    app: str,
    version: int,
    *,
    store_id: str | None,
    storage_options: dict[str, Any] | None = None,
) -> bool:
    """Decide batch ``(app, version)`` with no winners (a job that can never run
    it again): its transactions are discarded. False if it was decided earlier."""
    objects = open_objects(root, storage_options or None)
    commits = root_kind(root).commit_log(root, objects, DEFAULT_IO, store_id)
    return commits.commit(app, version, [], 0)


def seal_orphans(
    open_store: OpenStore,
    root: str,
    config: StoreConfig,
    storage_options: dict[str, Any] | None = None,
) -> tuple[list[tuple[str, int]], BaseException | None]:
    """Seal committed data of partitions whose writer is gone, best effort (what
    :meth:`QuiverStore.finalize_idle_partitions` sealed, and why it failed): this
    machine's WALs whose lock no live writer holds, and on an object root, at most
    every :data:`STAGED_PASS_PERIOD_S`, the committed staged transactions of
    partitions whose writer lease is free (a lost machine's, §10.2).

    Once this process knows the root's WAL directory, a call that finds no WAL
    with data and a free lock there opens nothing (no lease or manifest read)."""
    look = orphan_look(root, config)
    if look is None:
        return [], None
    try:
        store = open_store(
            root,
            config,
            partition=None,
            create=False,
            storage_options=storage_options or None,
        )
        try:
            local = orphans_opened(look, store.wal_root)
            sealed = (
                store.finalize_idle_partitions(local=local, staged=look.staged_due)
                if local or look.staged_due
                else []
            )
        finally:
            store.close()
    except (QuiverError, OSError) as e:  # a decision is durable; sealing can wait
        return [], e
    return sealed, None
