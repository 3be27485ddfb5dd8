"""The Quiver sink: exactly-once ``df.writeStream.format("quiver")`` and ``df.write``.

Protocol (ARCHITECTURE.md §9):

1. Planning (driver, every micro-batch): options and the schema are validated; the
   store's schema is recorded by the first write and an incompatible query fails
   here, before any task runs.
2. Tasks (executors): each task writes its Arrow batches as one transaction
   ``(app = streaming query id, version = batch id)`` into its worker's core slot,
   flushes the WAL (durable = the task's acknowledgement) and returns a
   :class:`QuiverCommitMessage` naming ``(partition, txn_id)``.
3. Commit (driver, on a fresh writer): one atomic commit record lists the winning
   transactions. It is idempotent: an existing decision stands, so a replayed
   batch or a second commit call is a no-op. Only winners are ever finalized into
   visible segments; every other transaction of that batch is discarded.

``abort`` writes no decision on purpose: a decision with no winners would make a
later rerun of the same batch id lose its rows.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .. import format as fmt
from ..commits import CommitLog
from ..config import NAME_RE, StoreConfig
from ..errors import (
    ConfigError,
    LeaseLostError,
    QuiverError,
    StoreAtCapacityError,
    StoreClosedError,
    WalFailedError,
)
from ..fs import partition_locked
from ..objects import ObjectStore
from ..objects.urls import open_objects
from ..segment.urls import is_object_root
from ..store import QuiverStore
from . import slots
from .options import as_given, storage_options, validate_sink_options
from .user_errors import one_line

log = logging.getLogger(__name__)

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


@dataclass
class QuiverCommitMessage(WriterCommitMessage):
    """What a task reports: its transaction in its core slot (``txn_id`` 0 = no rows)."""

    app: str
    version: int
    partition: str | None
    txn_id: int
    rows: int
    bytes: int
    task: str = ""


# -- schema ----------------------------------------------------------------------------
def _utc(t: pa.DataType) -> pa.DataType:
    """``t`` with every zoned timestamp in UTC (zone is display metadata: same instants)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, "UTC") if t.tz is not None else t
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_utc(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_utc(t.key_type)),
            t.item_field.with_type(_utc(t.item_type)),
            t.keys_sorted,
        )
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_utc(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_utc(t.value_type)))
    return t


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema the store records for a Spark schema (zoned timestamps in UTC).

    >>> from pyspark.sql.types import StructType, StructField, LongType
    >>> arrow_schema(StructType([StructField("id", LongType(), False)]))
    id: int64 not null
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    base = to_arrow_schema(schema, timezone="UTC", prefers_large_types=False)
    return pa.schema([f.with_type(_utc(f.type)) for f in base])


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``target``'s schema: free when equal, else a per-column cast.

    Spark sends zoned timestamps in the session time zone (and large string types
    when ``spark.sql.execution.arrow.useLargeVarTypes`` is on); the store keeps one.
    """
    if batch.schema.equals(target):
        return batch
    cols = [
        col if col.type.equals(f.type) else col.cast(f.type)
        for col, f in zip(batch.columns, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(cols, schema=target)


def check_event_time_column(config: StoreConfig, schema: pa.Schema) -> None:
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
            "eventTimeColumn", col, "a timestamp, date or integer column: " + ", ".join(ok)
        )


# -- shared driver/executor logic ----------------------------------------------------------
class _QuiverWriterBase:
    """State shared by the batch and streaming writers: plain, picklable values only."""

    def __init__(self, options: Mapping[str, Any], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigError(
                "mode",
                "overwrite/complete",
                "append: a Quiver store is an append-only buffer whose consumers track "
                "what they read; remove the store directory (or write to a new path) to start over",
            )
        self.options = {str(k): str(v) for k, v in options.items() if v is not None}
        self.root, self.config = validate_sink_options(self.options)
        self.storage = storage_options(self.options)
        self.spark_schema = schema
        self.target = arrow_schema(schema)
        check_event_time_column(self.config, self.target)
        try:
            store = QuiverStore.open(
                self.root, self.config, partition=None, storage_options=self.storage or None
            )
        except ConfigError as e:  # an option contradicting the store: name it as given
            raise as_given(e, self.options) from e
        try:
            store.ensure_schema(self.target)  # raises SchemaMismatchError with both schemas
            self.store_id = store.store_id  # named by the commit records (ARCHITECTURE.md §6.4)
        finally:
            store.close()

    def _objects(self) -> ObjectStore:
        """The root's objects (commit records live there)."""
        return open_objects(self.root, self.storage or None)

    def _commits(self) -> CommitLog:
        """The root's commit records; those written name this store."""
        return CommitLog(self._objects(), store=self.store_id)

    # executor side --------------------------------------------------------------------
    def _write_txn(
        self, iterator: Iterator[pa.RecordBatch], app: str, version: int, tag: str
    ) -> QuiverCommitMessage:
        store: QuiverStore | None = None
        txn = rows = nbytes = 0
        kept: list[pa.RecordBatch] = []  # staged on an object root (§12.6)
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if store is None:
                    store = slots.slot_store(self.root, self.config, self.storage)
                    txn = store.begin_txn(app=app, version=version, tag=tag)
                batch = conform(batch, self.target)
                store.append(batch, txn_id=txn)
                if store.on_objects:
                    kept.append(batch)
                rows += batch.num_rows
                nbytes += batch.nbytes
            if store is not None:
                store.flush()  # durable: this is the task's acknowledgement
                if kept:  # and in the bucket: no committed row lives on one machine only
                    store.stage_txn(txn, kept)
        except StoreAtCapacityError as e:
            raise StoreAtCapacityError(
                f"quiver sink: store {self.root} is at capacity (retention.size_cap / "
                f"wal.max_size) and no space came within retention.backpressure_timeout; "
                f"this task fails and Spark retries it (retryable; nothing acknowledged is "
                f"lost): {e}"
            ) from e
        except (WalFailedError, StoreClosedError, LeaseLostError) as e:
            # the slot is of no more use to this process (a lost lease, FencedError
            # included, is never regained by the holder that lost it): the next task
            # claims a slot afresh; this one fails, and Spark's retry or the next batch
            # writes its rows (they were never reported, so never committed)
            slots.evict(self.root, self.config, e, self.storage)
            raise
        partition = store.writer.pid if store is not None and store.writer is not None else None
        log.debug(
            "quiver.sink.write app=%s version=%d partition=%s txn=%d rows=%d tag=%s",
            app,
            version,
            partition,
            txn,
            rows,
            tag,
        )
        return QuiverCommitMessage(app, version, partition, txn, rows, nbytes, tag)

    # driver side ----------------------------------------------------------------------
    def _commit(self, messages: Sequence[WriterCommitMessage | None], version: int) -> bool:
        msgs = [m for m in messages if isinstance(m, QuiverCommitMessage)]
        apps = {m.app for m in msgs}
        if len(apps) > 1 or any(m.version != version for m in msgs):
            raise QuiverError(
                f"quiver sink: commit messages of batch {version} name other transactions: "
                f"{sorted({(m.app, m.version) for m in msgs})}"
            )
        winners = [(m.partition, m.txn_id) for m in msgs if m.txn_id and m.partition]
        if not winners:
            log.info("quiver.sink.commit_empty version=%d tasks=%d", version, len(messages))
            return False
        app = apps.pop()
        rows = sum(m.rows for m in msgs)
        commits = self._commits()
        fresh = commits.commit(app, version, winners, rows)
        if not fresh and (earlier := commits.get(app, version)) is not None and not earlier.winners:
            raise QuiverError(
                f"quiver sink: batch {version} of query {app} was discarded earlier "
                "(`quiver txns ... discard`): its rerun is refused so that its rows are "
                "neither stored twice nor dropped silently. This checkpoint cannot go past "
                "that batch: start the query on a new checkpoint, choosing its starting "
                "point so that batches already in the store are not written again."
            )
        log.info(
            "quiver.sink.commit root=%s app=%s version=%d winners=%d rows=%d new=%s",
            self.root,
            app,
            version,
            len(winners),
            rows,
            fresh,
        )
        self._look_for_earlier_batches(commits, app, version, fresh)
        self._finalize_orphans()
        return fresh

    def _look_for_earlier_batches(
        self, commits: CommitLog, app: str, version: int, fresh: bool
    ) -> None:
        """Warn, once per query and driver process, when the query's first batch
        committed here is not its first and the store holds none of its earlier ones.

        A query restarted from a checkpoint written against another store resumes at
        that checkpoint's next batch: the batches before it went to the other store
        (and a checkpoint whose input was all written runs no batch at all, so nothing
        here can tell). Not refused: a query whose earlier batches had no rows commits
        none of them either (an empty batch writes no record), and a query moved to a
        new store on purpose looks the same. At most one HEAD and one listing of the
        query's records, the first time; none when this process committed an earlier
        batch or the record was already there (a replay)."""
        key = (self.root, app)
        if key in _HISTORY_SEEN:
            return
        _HISTORY_SEEN.add(key)
        if version == 0 or not fresh:
            return
        try:
            earlier = commits.has_earlier(app, version)
        except (QuiverError, OSError) as e:  # it only informs
            log.debug("quiver.sink.history_unknown root=%s app=%s: %r", self.root, app, e)
            return
        if not earlier:
            log.warning(
                "quiver.sink.no_earlier_batches root=%s store=%s query=%s batch=%d: this "
                "store holds no commit of this query's batches before %d. If the query's "
                "checkpoint was written against another store, their rows are in that "
                "store and Spark does not write them again: to write the query's input "
                "into this store from its start, give it a new checkpointLocation. "
                "Nothing is wrong if its earlier batches had no rows.",
                self.root,
                self.store_id,
                app,
                version,
                version,
            )

    def _finalize_orphans(self) -> None:
        """Seal committed data of slots whose writer process is gone (best effort), and
        on an object root, at most every :data:`STAGED_PASS_PERIOD_S`, the committed
        staged transactions of partitions whose writer lease is free (a lost machine's,
        §12.6).

        Only the WALs on this machine can be sealed here, and a slot whose WAL lock a
        live writer holds is no orphan: once the WAL directory of the root is known
        (from the first commit of this process), a commit that finds no WAL with data
        and a free lock asks nothing of the store (no open, no lease or manifest read)."""
        key = (self.root, self.config.wal.path)
        wal_root = _WAL_ROOTS.get(key)
        now = time.monotonic()
        staged_due = is_object_root(self.root) and (
            now - _STAGED_PASSES.get(key, -math.inf) >= STAGED_PASS_PERIOD_S
        )
        if wal_root is not None and not _orphans_possible(wal_root) and not staged_due:
            return
        try:
            store = QuiverStore.open(
                self.root,
                self.config,
                partition=None,
                create=False,
                storage_options=self.storage or None,
            )
            try:
                _WAL_ROOTS[key] = store.wal_root
                local = _orphans_possible(store.wal_root)
                if staged_due:
                    _STAGED_PASSES[key] = now
                sealed = (
                    store.finalize_idle_partitions(local=local, staged=staged_due)
                    if local or staged_due
                    else []
                )
            finally:
                store.close()
        except (QuiverError, OSError) as e:  # the decision is durable; sealing can wait
            log.warning("quiver.sink.finalize_idle_failed root=%s error=%r", self.root, e)
            return
        if sealed:
            log.info("quiver.sink.finalize_idle root=%s sealed=%s", self.root, sealed)

    def _abort(self, messages: Sequence[WriterCommitMessage | None], version: int) -> None:
        msgs = [m for m in messages if isinstance(m, QuiverCommitMessage) and m.txn_id]
        # No decision is written: Spark reruns this batch id (same query) and the
        # rerun's commit decides it. Transactions of a batch never rerun stay pending
        # (``quiver status`` lists them; an operator may discard them).
        log.warning(
            "quiver.sink.abort root=%s version=%d tasks=%d written_txns=%s",
            self.root,
            version,
            len(messages),
            [(m.partition, m.txn_id) for m in msgs],
        )


_HISTORY_SEEN: set[tuple[str, str]] = set()
"""The (root, query id) pairs whose commits this driver process has looked at."""

_WAL_ROOTS: dict[tuple[str, str | None], str] = {}
"""The local WAL directory of each (root, ``wal.path``) the driver committed to."""

STAGED_PASS_PERIOD_S = 10.0
"""How often, at most, a driver's commits look for a lost machine's staged transactions
(one listing of ``partitions/``; a lost writer's lease must also be seen unchanged for
its ttl first, so the loss-to-readable time is the ttl plus at most this)."""
_STAGED_PASSES: dict[tuple[str, str | None], float] = {}


def _orphans_possible(wal_root: str) -> bool:
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
            if not os.listdir(os.path.join(wal_root, pid, fmt.WAL_DIR)):
                continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not partition_locked(os.path.join(wal_root, pid, fmt.LOCK_FILE)):
            return True
    return False


class QuiverStreamWriter(_QuiverWriterBase, DataSourceStreamArrowWriter):
    """Exactly-once streaming writer: Arrow batches in, one transaction per task.

    Built by ``QuiverDataSource.streamWriter`` on the driver at every micro-batch,
    pickled to executors for :meth:`write`, and built again for :meth:`commit`
    (PySpark commits on a fresh writer): all it needs is in its options.

    Parameters
    ----------
    options : dict
        The data source options (strings); see README "Options".
    schema : StructType
        The stream's schema; recorded in the store by its first write.
    overwrite : bool
        True for complete output mode, which a Quiver store refuses.

    Examples
    --------
    >>> q = (spark.readStream.format("rate").load()                  # doctest: +SKIP
    ...      .writeStream.format("quiver")
    ...      .option("checkpointLocation", "/ckpt/ingest")
    ...      .option("segment.max_open_duration", "2s")
    ...      .start("/data/quiver"))
    >>> QuiverStore.open("/data/quiver", partition=None).scan()      # doctest: +SKIP
    """

    @one_line
    def write(self, iterator: Iterator[pa.RecordBatch]) -> QuiverCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            raise QuiverError("quiver sink: write() runs only inside a Spark task")
        app = tc.getLocalProperty(QUERY_ID)
        batch = tc.getLocalProperty(BATCH_ID)
        if not app or batch is None:
            raise QuiverError(
                f"quiver sink: task has no streaming query id / batch id "
                f"({QUERY_ID}={app!r}, {BATCH_ID}={batch!r})"
            )
        tag = f"{tc.partitionId()}.{tc.attemptNumber()}.{tc.taskAttemptId()}"
        return self._write_txn(iterator, app, int(batch), tag)

    @one_line
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Durably decide batch ``batchId`` (idempotent), then seal orphaned slots."""
        self._commit(messages, int(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Write no decision (see module docstring); log what the failed batch wrote."""
        self._abort(messages, int(batchId))


class QuiverBatchWriter(_QuiverWriterBase, DataSourceArrowWriter):
    """``df.write.format("quiver").mode("append").save(path)``: one transaction per job.

    The job's identity is a uuid made on the driver when the writer is built; the
    same pickled writer runs the tasks and the commit, so the job commits once.

    Examples
    --------
    >>> spark.range(10).write.format("quiver").mode("append").save("/data/q")  # doctest: +SKIP
    """

    def __init__(self, options: Mapping[str, Any], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        self.app = f"batch-{uuid.uuid4().hex}"

    @one_line
    def write(self, iterator: Iterator[pa.RecordBatch]) -> QuiverCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        tag = f"{tc.partitionId()}.{tc.attemptNumber()}.{tc.taskAttemptId()}" if tc else "0.0.0"
        return self._write_txn(iterator, self.app, 0, tag)

    @one_line
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Durably decide the job (its winners become visible)."""
        self._commit(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Decide the job with no winners: its uuid is never reused, so nothing can rerun."""
        self._abort(messages, 0)
        try:
            self._commits().commit(self.app, 0, [], 0)
        except (QuiverError, OSError) as e:  # best effort: status reports the pending txns
            log.warning("quiver.sink.abort_discard_failed app=%s error=%r", self.app, e)
