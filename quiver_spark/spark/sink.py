"""The Quiver sink: exactly-once ``df.writeStream.format("quiver")`` and ``df.write``.

Protocol (ARCHITECTURE.md §10):

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

Every decision and step is the engine's (:meth:`QuiverStore.prepare_writes`,
:meth:`~QuiverStore.write_task`, :meth:`~QuiverStore.commit_batch`,
:meth:`~QuiverStore.discard_batch`, :mod:`quiver_spark.write_jobs`): this module
turns Spark's calls, task context and commit messages into those calls, and logs what
they did.
"""

from __future__ import annotations

import logging
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

from ..errors import ConfigError, QuiverError, SinkContextError, StoreAtCapacityError
from ..store import QuiverStore
from . import slots
from .options import spark_options, storage_options, validate_sink_options
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
        self.options = spark_options(options)  # folded once: the profile read once
        self.root, self.config = validate_sink_options(self.options)
        self.storage = storage_options(self.options)
        self.spark_schema = schema
        self.target = arrow_schema(schema)
        # named by the commit records (ARCHITECTURE.md §10.1); SchemaMismatchError names
        # both schemas, a ConfigError the option contradicting the store
        self.store_id = QuiverStore.prepare_writes(
            self.root, self.config, self.target, storage_options=self.storage or None
        )

    # executor side --------------------------------------------------------------------
    def _write_txn(
        self, iterator: Iterator[pa.RecordBatch], app: str, version: int, tag: str
    ) -> QuiverCommitMessage:
        try:
            done = QuiverStore.write_task(
                lambda: slots.slot_store(self.root, self.config, self.storage),
                (conform(batch, self.target) for batch in iterator),
                app,
                version,
                tag,
                lost=lambda e: slots.evict(self.root, self.config, e, self.storage),
            )
        except StoreAtCapacityError as e:
            raise StoreAtCapacityError(
                f"quiver sink: store {self.root} is at capacity (retention.size_cap / "
                f"wal.max_size) and no space came within retention.backpressure_timeout; "
                f"this task fails and Spark retries it (retryable; nothing acknowledged is "
                f"lost): {e}"
            ) from e
        log.debug(
            "quiver.sink.write app=%s version=%d partition=%s txn=%d rows=%d tag=%s",
            app,
            version,
            done.partition,
            done.txn_id,
            done.rows,
            tag,
        )
        return QuiverCommitMessage(
            app, version, done.partition, done.txn_id, done.rows, done.bytes, tag
        )

    # driver side ----------------------------------------------------------------------
    def _commit(self, messages: Sequence[WriterCommitMessage | None], version: int) -> bool:
        msgs = [m for m in messages if isinstance(m, QuiverCommitMessage)]
        apps = {m.app for m in msgs}
        if len(apps) > 1 or any(m.version != version for m in msgs):
            named = sorted({(m.app, m.version) for m in msgs})
            raise SinkContextError(
                f"quiver sink: commit messages of batch {version} name other transactions: {named}",
                query_id=named,
                batch_id=version,
            )
        winners = [(m.partition, m.txn_id) for m in msgs if m.txn_id and m.partition]
        if not winners:
            log.info("quiver.sink.commit_empty version=%d tasks=%d", version, len(messages))
            return False
        app = apps.pop()
        rows = sum(m.rows for m in msgs)
        done = QuiverStore.commit_batch(
            self.root,
            self.config,
            app,
            version,
            winners,
            rows,
            store_id=self.store_id,
            storage_options=self.storage or None,
        )
        log.info(
            "quiver.sink.commit root=%s app=%s version=%d winners=%d rows=%d new=%s",
            self.root,
            app,
            version,
            len(winners),
            rows,
            done.fresh,
        )
        if done.without_earlier:
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
        if done.seal_error is not None:  # the decision is durable; sealing can wait
            log.warning(
                "quiver.sink.finalize_idle_failed root=%s error=%r", self.root, done.seal_error
            )
        if done.sealed:
            log.info("quiver.sink.finalize_idle root=%s sealed=%s", self.root, done.sealed)
        return done.fresh

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
            raise SinkContextError("quiver sink: write() runs only inside a Spark task")
        app = tc.getLocalProperty(QUERY_ID)
        batch = tc.getLocalProperty(BATCH_ID)
        if not app or batch is None:
            raise SinkContextError(
                f"quiver sink: task has no streaming query id / batch id "
                f"({QUERY_ID}={app!r}, {BATCH_ID}={batch!r})",
                query_id=app,
                batch_id=batch,
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
            QuiverStore.discard_batch(
                self.root, self.app, 0, store_id=self.store_id, storage_options=self.storage or None
            )
        except (QuiverError, OSError) as e:  # best effort: status reports the pending txns
            log.warning("quiver.sink.abort_discard_failed app=%s error=%r", self.app, e)
