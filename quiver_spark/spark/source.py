"""The Quiver source: ``spark.readStream.format("quiver")`` and ``spark.read``.

A translation of Spark's streaming calls to the engine's subscription API
(:mod:`quiver_spark.subscription`): offsets are
:class:`~quiver_spark.subscription.position.Position` JSON naming the store
(:mod:`.offsets`: a checkpoint written against another store is refused at the first
call that hands its offsets back), ``initialOffset`` is :meth:`Subscription.start`,
``latestOffset`` is :meth:`~Subscription.plan`, ``partitions`` splits
:meth:`~Subscription.segments`, ``commit`` is :meth:`~Subscription.ack` (a durable
acknowledgement, then the store's retention pass). A batch read's ``pushFilters`` turns
Spark's filters into comparisons and its ``partitions`` is
:func:`~quiver_spark.subscription.read_tasks.plan_batch_read`. Everything decided there
is testable without a JVM.

Where things run (PySpark 4.3): ``initialOffset``, ``latestOffset``, ``partitions``,
``commit`` and ``stop`` in one long-lived Python process per query (the subscription
and its live-consumer lock live there, opened lazily); ``read`` in executor workers
on a copy pickled at query start, so it uses only its input partition.

>>> (spark.readStream.format("quiver")                             # doctest: +SKIP
...     .option("subscriber", "parquet_exporter")
...     .option("maxSegmentsPerTrigger", "8")
...     .load("/data/quiver")
...     .writeStream.format("parquet")
...     .option("checkpointLocation", "/ckpt/exporter")
...     .start("/out"))
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.datasource import EqualTo as FilterEqualTo
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..errors import SubscriberError
from ..store import QuiverStore
from ..subscription import SegmentMeta, Subscription, open_store
from ..subscription.planning import Caps
from ..subscription.position import Position
from ..subscription.read_tasks import Comparison, plan_batch_read, read_tasks
from .offsets import QuiverOffset, offset_json
from .options import spark_options, store_config
from .source_options import SourceOptions, parse_source_options
from .source_read import (
    QuiverInputPartition,
    arrow_target,
    check_read_schema,
    read_partition,
)

log = logging.getLogger(__name__)


class _QuiverReading:
    """What the stream and batch readers share: parsed options, splits and ``read``."""

    def _init_reading(
        self, options: Mapping[str, Any], schema: StructType, *, streaming: bool
    ) -> None:
        self.options = spark_options(options)  # folded once: the profile read once
        self.schema = schema
        self.opts: SourceOptions = parse_source_options(self.options, streaming=streaming)
        self.config = store_config(self.options)
        self.target = arrow_target(schema)
        store = open_store(self.opts.path, self.config, self.opts.storage_options)
        try:
            check_read_schema(store, schema, self.opts.include_metadata)
        except BaseException:
            store.close()
            raise
        if not streaming:  # a batch read plans in another process (Spark's planner)
            store.close()
        self._store: QuiverStore | None = store if streaming else None
        """The store a stream reader opened, used by its subscription (the stream
        reader's calls all run in one process: one open per handle); never pickled."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None  # never leaves the planning process
        if "_subscription" in state:
            state["_subscription"] = None
        return state

    def _take_store(self) -> QuiverStore:
        """The store this handle opened, once; a fresh open after that (a batch
        reader, or after unpickling)."""
        store, self._store = self._store, None
        if store is None:
            store = open_store(self.opts.path, self.config, self.opts.storage_options)
        return store

    def _splits(
        self, metas: Sequence[SegmentMeta], store: QuiverStore, subscriber: str | None
    ) -> list[InputPartition]:
        """The input partitions reading ``metas``: large segments split, small ones
        packed (:func:`~quiver_spark.subscription.read_tasks.pack_read_tasks`), keeping at least one
        task per local CPU."""
        tasks = read_tasks(
            metas,
            store,
            subscriber=subscriber,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            split_size_bytes=self.opts.split_size_bytes,
            min_tasks=os.cpu_count() or 1,
            storage_options=self.opts.storage_options,
        )
        return [QuiverInputPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.target)


class QuiverStreamReader(_QuiverReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over finalized segments; commits acknowledge for ``subscriber``."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._init_reading(options, schema, streaming=True)
        self._subscription: Subscription | None = None
        self._target: Position | None = None
        self._resumed = False  # offsets with segments seen and accepted

    def _sub(self) -> Subscription:
        if self._subscription is None:
            assert self.opts.subscriber is not None
            store = self._take_store()
            try:
                self._subscription = Subscription(
                    store,
                    self.opts.subscriber,
                    fail_on_data_loss=self.opts.fail_on_data_loss,
                    owns_store=True,
                    order=self.opts.catch_up_order,
                    head_share=self.opts.head_share,
                    horizon=self.opts.horizon_s,
                )
            except BaseException:
                store.close()
                raise
        return self._subscription

    def _store_id(self) -> str:
        return self._sub().store.required_store_id()

    def _offset(self, position: Position) -> dict[str, Any]:
        """``position`` as Spark stores it: naming this store."""
        return offset_json(position, self._store_id())

    def _resume(self, raw: dict[str, Any] | None) -> Position:
        """The position of an offset Spark hands back (from its checkpoint after a
        restart): refused when it names another store; an offset that names none
        (written before offsets named their store) is refused while its subscriber is
        not registered here, since registering it would skip this store's rows."""
        sub = self._sub()
        offset = QuiverOffset.from_json(raw)
        position = offset.resumed_on(self._store_id(), sub.store.root)
        if offset.store is None and position.segments and not self._resumed:
            if not sub.registered():
                raise SubscriberError(self._unnamed_unregistered(position))
            self._resumed = True
        return position

    def _unnamed_unregistered(self, position: Position) -> str:
        sub = self._sub()
        root, name = sub.store.root, sub.name
        return (
            f"quiver source: subscriber {name!r} is not registered in the store at {root} "
            f"(store {self._store_id()}), and this query's checkpoint resumes it after "
            f"offsets {dict(position.segments)} that do not say which store they were "
            "written against (they predate offsets naming their store). If it was another "
            f"store, registering {name!r} here would make the query acknowledge this "
            "store's segments up to those offsets without reading them: point the query "
            "at that store, or start it with a new checkpointLocation (it then starts at "
            "startingPosition). Only if the checkpoint was written against this store "
            f"(the subscriber was removed or expired): quiver subscribers {root} add "
            f"{name}, then restart the query"
        )

    def initialOffset(self) -> dict[str, Any]:
        """Where a query without a checkpoint starts (``startingPosition``)."""
        start = self.opts.starting_position
        return self._offset(self._sub().start(start, since_ns=self.opts.starting_timestamp_ns))

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_segments is not None:
            return ReadMaxFiles(o.max_segments)
        if o.max_bytes is not None:
            return ReadMaxBytes(o.max_bytes)
        if o.max_rows is not None:
            return ReadMaxRows(o.max_rows)
        return ReadAllAvailable()

    def _caps(self, limit: ReadLimit) -> Caps:
        """The options' caps tightened by Spark's ``limit``; ReadAllAvailable lifts all."""
        if isinstance(limit, ReadAllAvailable):
            return Caps()
        o = self.opts
        caps = Caps(o.max_segments, o.max_bytes, o.max_rows)
        if isinstance(limit, ReadMaxFiles):
            return caps.tightened(Caps(max_segments=limit.max_files))
        if isinstance(limit, ReadMaxBytes):
            return caps.tightened(Caps(max_bytes=limit.max_bytes))
        if isinstance(limit, ReadMaxRows):
            return caps.tightened(Caps(max_rows=limit.max_rows))
        return caps

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end offset of the next batch (see :meth:`Subscription.next_batch_end`:
        oldest first, or newest first with ``catchUpOrder=newest``, whose offsets then
        hold the backlog left below the head).

        Spark plans from ``start`` only after the batch that ended there is in its
        commit log, and never calls ``commit`` for the last batch of a run: ``start``
        is acknowledged here, so a subscriber run with Trigger.AvailableNow does not
        pin its last batch's segments until new data arrives.
        """
        sub = self._sub()
        with sub.one_call():  # the ack log caught up and the partitions listed once
            begin = self._resume(start)
            if start:
                sub.ack(begin)
            return self._offset(sub.next_batch_end(begin, self._caps(limit), until=self._target))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Everything available at the last plan (query progress: lag = latest - end)."""
        sub = self._subscription
        latest = sub.latest if sub is not None else None
        return self._offset(latest) if latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the AvailableNow target: everything published (or idle-sealed) now."""
        sub = self._sub()
        sub.seal_idle(force=True)
        self._target = sub.top()
        log.info("quiver.source.available_now target=%s", self._target.segments)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Read tasks over the readable segments in ``(start, end]`` (small ones packed,
        large ones split); missing ones follow the data-loss policy (ARCHITECTURE.md §17)."""
        sub = self._sub()
        metas = sub.segments(self._resume(start), self._resume(end))
        return self._splits(metas, sub.store, sub.name)

    def commit(self, end: dict[str, Any]) -> None:
        """Acknowledge every segment ``end`` includes (up to it, but for its backlog),
        then the store's retention pass."""
        self._sub().ack(self._resume(end))

    def stop(self) -> None:
        sub, self._subscription = self._subscription, None
        store, self._store = self._store, None
        if store is not None:  # opened, never planned with
            store.close()
        if sub is not None:
            sub.close()
            log.info("quiver.source.stop subscriber=%s", sub.name)


# -- batch reads ----------------------------------------------------------------------------
_OPS = {
    FilterEqualTo: "eq",
    In: "in",
    GreaterThan: "gt",
    GreaterThanOrEqual: "ge",
    LessThan: "lt",
    LessThanOrEqual: "le",
}


def _comparison(f: Filter) -> Comparison | None:
    """A pushed filter as the comparison segments are skipped by, or None."""
    op = _OPS.get(type(f))
    attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if op is None or len(attribute) != 1:
        return None
    value: Any = getattr(f, "value", None)
    return attribute[0], op, list(value) if isinstance(f, In) else [value]


class QuiverBatchReader(_QuiverReading, DataSourceReader):
    """Reads every retained segment; prunes segments by event time and ingestion time.

    ``pushFilters`` (needs ``spark.sql.python.filterPushdown.enabled=true``) keeps
    comparisons on the store's ``segment.event_time_column`` and on
    ``_quiver_ingestion_time`` to skip whole segments whose min/max cannot match. Every
    filter is handed back to Spark, which still evaluates it row by row: pruning only
    saves reads.
    """

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._init_reading(options, schema, streaming=False)
        self.comparisons: list[Comparison] = []

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep the comparisons segment statistics may serve; hand every filter back."""
        for f in filters:
            found = _comparison(f)
            if found is not None:
                self.comparisons.append(found)
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        store = self._take_store()
        try:
            tasks = plan_batch_read(
                store,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                split_size_bytes=self.opts.split_size_bytes,
                comparisons=self.comparisons,
                min_tasks=os.cpu_count() or 1,
                storage_options=self.opts.storage_options,
            )
        finally:
            store.close()
        return [QuiverInputPartition(t) for t in tasks]
