"""The Quiver source: ``spark.readStream.format("quiver")`` and ``spark.read``.

Streams read finalized segments; every Spark commit of a micro-batch becomes a
durable ack of its segments for the query's subscriber, after which retention
deletes what every subscriber has acknowledged.

Where things run (PySpark 4.3): ``initialOffset``, ``latestOffset``, ``partitions``,
``commit`` and ``stop`` in one long-lived Python process per query (all runtime state,
the store handle, the subscriber registry and the live-subscriber ``flock`` live
there, created lazily by :meth:`QuiverStreamReader._runtime`); ``read`` in executor
workers on a copy pickled at query start, so it only uses its input partition.
Offsets: :mod:`quiver_spark.spark.offsets`.

>>> (spark.readStream.format("quiver")                             # doctest: +SKIP
...     .option("subscriber", "parquet_exporter")
...     .option("maxSegmentsPerTrigger", "8")
...     .load("/data/quiver")
...     .writeStream.format("parquet")
...     .option("checkpointLocation", "/ckpt/exporter")
...     .start("/out"))
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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

from ..config import StoreConfig
from ..errors import (
    CorruptionError,
    LockedError,
    SegmentMissingError,
    StoreNotFoundError,
    SubscriberError,
)
from ..format import SUBSCRIBERS_DIR
from ..fs import PartitionLock
from ..metrics import Metrics
from ..missing import DELETED, MISSING, MissingSegment, PartitionEvidence, evidence
from ..retention import apply_retention
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..subscribers import Outcome, StartPosition, SubscriberRegistry
from .offsets import QuiverOffset
from .options import store_config
from .source_options import SourceOptions, StartingPosition, parse_source_options
from .source_read import (
    META_INGESTION_TIME,
    READERS_DIR,
    DataLossError,
    QuiverInputPartition,
    ReadSchemaError,
    SchemaUnavailableError,
    arrow_target,
    read_partition,
    record_data_loss,
    spark_schema_of,
    split_segment,
)

log = logging.getLogger(__name__)

SOURCE_DROPPED = "quiver.source.dropped_segments_total"  # {subscriber}
SOURCE_LOST = "quiver.source.lost_segments_total"  # {subscriber, reason}
SOURCE_ACKED = "quiver.source.acked_segments_total"  # {subscriber}
RETENTION_IDLE_PERIOD_S = 5.0  # retention also runs this often when nothing new was acked


def _open_store(opts: SourceOptions, config: StoreConfig) -> QuiverStore:
    try:
        return QuiverStore.open(opts.path, config, partition=None, create=False, background=False)
    except StoreNotFoundError as e:
        raise StoreNotFoundError(
            f"{opts.path} is not a Quiver store yet: start the writer first "
            "(df.writeStream.format('quiver').start(path)) or check the path"
        ) from e


def store_spark_schema(options: Mapping[str, Any]) -> StructType:
    """The Spark schema of the store named by ``options`` (``DataSource.schema()``).

    Raises
    ------
    SchemaUnavailableError
        The store exists but nothing was written yet, so it has no schema.
    """
    opts = parse_source_options(options, streaming=False)
    store = _open_store(opts, store_config(options))
    try:
        schema = store.schema()
    finally:
        store.close()
    if schema is None:
        raise SchemaUnavailableError(
            f"the Quiver store at {opts.path} has no schema yet: start the writer first "
            "(the first write records the schema) or pass one with "
            "spark.readStream.schema(...)"
        )
    return spark_schema_of(schema, opts.include_metadata)


def _published_seqs(store: QuiverStore, partition: str) -> list[int]:
    """Seqs with a ``.meta`` in ``partition``, from one directory listing (no reads)."""
    return store.segment_location.published_seqs(partition)


def check_read_schema(store: QuiverStore, schema: StructType, include_metadata: bool) -> None:
    """Refuse a read schema naming a column the store lacks (it would read as nulls).

    A store without a schema yet (nothing written) accepts any read schema.
    """
    arrow = store.schema()
    if arrow is None:
        return
    have = spark_schema_of(arrow, include_metadata).fieldNames()
    unknown = [name for name in schema.fieldNames() if name not in have]
    if unknown:
        raise ReadSchemaError(
            f"the read schema names column(s) {unknown} that the Quiver store at "
            f"{store.root} does not have; its columns are {have}. Fix the names in "
            "spark.read/readStream.schema(...) or leave the schema out to use the store's"
        )


def _registry_if_any(root: str) -> SubscriberRegistry | None:
    """The subscriber registry if the store has one (a batch read creates nothing)."""
    if not os.path.isdir(os.path.join(root, SUBSCRIBERS_DIR)):
        return None
    return SubscriberRegistry.open(root)


# -- the live-subscriber lock ---------------------------------------------------------------
_live_mutex = threading.Lock()
_live: dict[str, tuple[int, PartitionLock]] = {}  # lock path -> (owner token, lock)


def _claim_live(root: str, subscriber: str, token: int) -> None:
    """Hold ``<root>/readers/<subscriber>.lock`` for this process's reader ``token``.

    The flock makes a second live query with the same subscriber (another process)
    fail fast. One query's reader runs in its own process, so a lock already held in
    this process by an older token belongs to a query that ended: it is taken over.
    """
    path = os.path.join(root, READERS_DIR, f"{subscriber}.lock")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _live_mutex:
        held = _live.get(path)
        if held is not None:
            _live[path] = (token, held[1])
            return
        try:
            lock = PartitionLock.acquire(path, purpose=f"source subscriber={subscriber}")
        except LockedError as e:
            raise SubscriberError(
                f"subscriber {subscriber!r} is already read by a live query ({e.holder}); "
                "two live queries cannot share a subscriber: give each its own "
                "option('subscriber', ...)"
            ) from e
        _live[path] = (token, lock)


def _release_live(root: str, subscriber: str, token: int) -> None:
    path = os.path.join(root, READERS_DIR, f"{subscriber}.lock")
    with _live_mutex:
        held = _live.get(path)
        if held is not None and held[0] == token:
            del _live[path]
            held[1].release()


# -- stream reader runtime --------------------------------------------------------------------
@dataclass
class _Available:
    """A segment available to plan (meta None: its .meta is unreadable)."""

    partition: str
    seq: int
    meta: SegmentMeta | None

    @property
    def order(self) -> int:
        return self.meta.min_ingestion_ns if self.meta else 0


@dataclass
class _Runtime:
    store: QuiverStore
    registry: SubscriberRegistry
    config: StoreConfig
    metrics: Metrics = field(default_factory=Metrics)
    metas: dict[tuple[str, int], SegmentMeta | None] = field(default_factory=dict)
    meta_errors: dict[tuple[str, int], CorruptionError] = field(default_factory=dict)
    target: QuiverOffset | None = None
    latest: QuiverOffset | None = None
    last_finalize: float = 0.0
    last_retention: float = 0.0


class _QuiverReading:
    """What the stream and batch readers share: parsed options, splits and ``read``."""

    def _init_reading(
        self, options: Mapping[str, Any], schema: StructType, *, streaming: bool
    ) -> None:
        self.options = dict(options)
        self.schema = schema
        self.opts = parse_source_options(self.options, streaming=streaming)
        self.config = store_config(self.options)
        self.target = arrow_target(schema)
        store = _open_store(self.opts, self.config)
        try:
            check_read_schema(store, schema, self.opts.include_metadata)
        finally:
            store.close()

    def _splits(
        self, meta: SegmentMeta, store: QuiverStore, subscriber: str | None
    ) -> list[InputPartition]:
        """The input partitions reading segment ``meta`` (large ones split)."""
        return [
            QuiverInputPartition(
                meta,
                b0,
                b1,
                segments_url=store.segments_url,
                storage_options=None,
                root=store.root,
                subscriber=subscriber,
                fail_on_data_loss=self.opts.fail_on_data_loss,
            )
            for b0, b1 in split_segment(meta, self.opts.split_size_bytes)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.target, self.opts.open_log)


class QuiverStreamReader(_QuiverReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over finalized segments; commits ack for ``subscriber``.

    Parameters
    ----------
    options
        Spark's options (see :mod:`quiver_spark.spark.source_options`).
    schema
        The query's schema (the store's, or one the user passed).
    """

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._init_reading(options, schema, streaming=True)
        self._rt: _Runtime | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rt"] = None  # runtime state never leaves the planning process
        return state

    # -- runtime (planning process only) -----------------------------------------------
    def _runtime(self) -> _Runtime:
        if self._rt is not None:
            return self._rt
        sub = self.opts.subscriber
        assert sub is not None
        store = _open_store(self.opts, self.config)
        try:
            _claim_live(store.root, sub, id(self))
            registry = SubscriberRegistry.open(
                store.root,
                checkpoint_records=self.config.ack_checkpoint_records,
                salvage=self.config.salvage,
            )
        except BaseException:
            store.close()
            raise
        self._rt = _Runtime(store=store, registry=registry, config=self.config)
        log.info("quiver.source.start root=%s subscriber=%s", store.root, sub)
        return self._rt

    def _finalize_idle(self, rt: _Runtime, *, force: bool = False) -> None:
        """Seal committed data of partitions whose writer is gone (rate limited)."""
        period = min(5.0, max(0.05, self.config.segment.max_open_duration_s / 2))
        now = time.monotonic()
        if not force and now - rt.last_finalize < period:
            return
        rt.last_finalize = now
        try:
            sealed = rt.store.finalize_idle_partitions()
        except (OSError, CorruptionError) as e:
            log.warning("quiver.source.finalize_idle_failed error=%s", e)
            return
        if sealed:
            log.info("quiver.source.finalize_idle sealed=%s", sealed)

    def _meta(self, rt: _Runtime, partition: str, seq: int) -> SegmentMeta | None:
        """Cached metadata (segments are immutable); None when the .meta is corrupt.

        Raises SegmentMissingError when it is not published (any more).
        """
        key = (partition, seq)
        if key in rt.metas:
            return rt.metas[key]
        try:
            meta: SegmentMeta | None = rt.store.segment_location.read_meta(partition, seq)
        except SegmentMissingError:
            raise
        except CorruptionError as e:
            log.warning(
                "quiver.source.meta_corrupt partition=%s seq=%d error=%s", partition, seq, e
            )
            meta = None
            rt.meta_errors[key] = e
        rt.metas[key] = meta
        return meta

    def _available(self, rt: _Runtime, start: QuiverOffset) -> dict[str, list[_Available]]:
        """Segments above ``start`` to plan: the published ones and quarantined ones
        (planning a quarantined seq is what reports its loss, see :meth:`partitions`)."""
        out: dict[str, list[_Available]] = {}
        loc = rt.store.segment_location
        for p in rt.store.partitions():
            segs = []
            published = _published_seqs(rt.store, p)
            for seq in published:
                if seq <= start.get(p):
                    continue
                try:
                    segs.append(_Available(p, seq, self._meta(rt, p, seq)))
                except SegmentMissingError:
                    continue  # deleted between listing and reading
            gone = set(loc.quarantined(p)) - set(published)
            segs.extend(_Available(p, seq, None) for seq in gone if seq > start.get(p))
            if segs:
                out[p] = sorted(segs, key=lambda a: a.seq)
        return out

    def _evidence(self, rt: _Runtime, p: str) -> PartitionEvidence:
        return evidence(rt.store.segment_location, rt.registry, p)

    # -- offsets ------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        """Where a query without a checkpoint starts (``startingPosition``)."""
        rt = self._runtime()
        sub = self.opts.subscriber
        assert sub is not None
        self._finalize_idle(rt, force=True)
        rt.registry.refresh()
        known = sub in rt.registry.subscribers()
        position = self.opts.starting_position or (
            StartingPosition.ACKED if known else StartingPosition.EARLIEST
        )
        # A seq published once but now lost (quarantined, vanished) counts as retained:
        # an earliest start plans it, so its loss is reported (§9a), never skipped.
        found = {p: self._evidence(rt, p) for p in rt.store.partitions()}
        retained = {
            p: sorted(ev.published | {m.seq for m in ev.losses()}) for p, ev in found.items()
        }
        rt.registry.register(
            sub,
            start=StartPosition.LATEST
            if position is StartingPosition.LATEST
            else StartPosition.EARLIEST,
            retained=retained,
            exist_ok=True,
        )
        marks: dict[str, int] = {}
        for p, seqs in retained.items():
            hwm = rt.registry.hwm(sub, p)
            if position is StartingPosition.ACKED or not seqs:
                marks[p] = hwm
            elif position is StartingPosition.EARLIEST:
                marks[p] = found[p].first_unread() - 1
            else:
                marks[p] = found[p].highest
        log.info(
            "quiver.source.initial_offset subscriber=%s position=%s known=%s offset=%s",
            sub,
            position.value,
            known,
            marks,
        )
        return QuiverOffset(marks).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_segments is not None:
            return ReadMaxFiles(o.max_segments)
        if o.max_bytes is not None:
            return ReadMaxBytes(o.max_bytes)
        if o.max_rows is not None:
            return ReadMaxRows(o.max_rows)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None, int | None]:
        """(segments, bytes, rows) caps for one batch; ReadAllAvailable lifts them all."""
        if isinstance(limit, ReadAllAvailable):
            return None, None, None
        o = self.opts

        def lower(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        segs, nbytes, rows = o.max_segments, o.max_bytes, o.max_rows
        if isinstance(limit, ReadMaxFiles):
            segs = lower(segs, limit.max_files)
        elif isinstance(limit, ReadMaxBytes):
            nbytes = lower(nbytes, limit.max_bytes)
        elif isinstance(limit, ReadMaxRows):
            rows = lower(rows, limit.max_rows)
        return segs, nbytes, rows

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end offset of the next batch: admitted segments, oldest first.

        Runs the idle-partition maintenance first, so data committed while the writer
        sits idle becomes visible. Always admits at least one segment when any is
        available; never goes past the AvailableNow target.
        """
        rt = self._runtime()
        # Spark plans the next batch from ``start`` only after the batch that ended
        # there is in its commit log, so everything up to ``start`` is processed: ack
        # it. Spark never calls commit() for the last batch of a run, and without this
        # a subscriber that runs with Trigger.AvailableNow would pin its last batch's
        # segments until new data arrived.
        if start:
            self.commit(start)
        self._finalize_idle(rt)
        begin = QuiverOffset.from_json(start)
        avail = self._available(rt, begin)
        rt.latest = begin.merged({p: v[-1].seq for p, v in avail.items()})
        if rt.target is not None:
            avail = {p: [a for a in v if a.seq <= rt.target.get(p)] for p, v in avail.items()}
        segs_cap, bytes_cap, rows_cap = self._limits(limit)
        heads = [(v[0].order, p, 0) for p, v in avail.items() if v]
        heapq.heapify(heads)
        admitted: dict[str, int] = {}
        n = nbytes = rows = 0
        while heads:
            _, p, i = heads[0]
            a = avail[p][i]
            size = a.meta.size_bytes if a.meta else 0
            count = a.meta.rows if a.meta else 0
            if n and (
                (segs_cap is not None and n + 1 > segs_cap)
                or (bytes_cap is not None and nbytes + size > bytes_cap)
                or (rows_cap is not None and rows + count > rows_cap)
            ):
                break
            n, nbytes, rows = n + 1, nbytes + size, rows + count
            admitted[p] = a.seq
            heapq.heappop(heads)
            if i + 1 < len(avail[p]):
                heapq.heappush(heads, (avail[p][i + 1].order, p, i + 1))
        end = begin.merged(admitted)
        if admitted:
            log.debug(
                "quiver.source.latest_offset segments=%d bytes=%d rows=%d end=%s",
                n,
                nbytes,
                rows,
                end.segments,
            )
        return end.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Everything published (for the query progress: lag = latest - end)."""
        rt = self._rt
        return rt.latest.to_json() if rt is not None and rt.latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the AvailableNow target: everything published (or idle-sealed) now."""
        rt = self._runtime()
        self._finalize_idle(rt, force=True)
        loc = rt.store.segment_location
        rt.target = QuiverOffset(
            {
                p: top
                for p in rt.store.partitions()
                if (top := max([*_published_seqs(rt.store, p), *loc.quarantined(p)], default=0))
            }
        )
        log.info("quiver.source.available_now target=%s", rt.target.segments)

    # -- planning ------------------------------------------------------------------------
    def _lost(
        self,
        rt: _Runtime,
        p: str,
        seq: int,
        reason: str,
        detail: str,
        evidence_path: str | None = None,
    ) -> None:
        sub = self.opts.subscriber
        record_data_loss(
            rt.store.root,
            sub,
            p,
            seq,
            reason,
            skipped=not self.opts.fail_on_data_loss,
            evidence=evidence_path,
        )
        rt.metrics.inc(SOURCE_LOST, subscriber=sub, reason=reason)
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                p,
                seq,
                f"{reason}: {detail}; set failOnDataLoss=false to skip it and count the loss",
                kind=reason,
                evidence=evidence_path,
            )
        log.warning(
            "quiver.source.data_loss partition=%s seq=%d reason=%s subscriber=%s",
            p,
            seq,
            reason,
            sub,
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One input partition per segment in ``(start, end]`` (large ones split).

        A pure function of the offsets, except for segments that are no longer there.
        Seqs are allocated without gaps, so every seq in a planned range was published;
        one without a ``.meta`` is classified (:mod:`quiver_spark.missing`): deleted by
        retention (recorded ``dropped``) is skipped with a warning and counted;
        quarantined, vanished, or with corrupt metadata fails the query naming
        partition and seq, or with ``failOnDataLoss=false`` is skipped and counted.
        """
        rt = self._runtime()
        sub = self.opts.subscriber
        begin, stop = QuiverOffset.from_json(start), QuiverOffset.from_json(end)
        out: list[InputPartition] = []
        refreshed = False
        for p, (lo, hi) in begin.ranges(stop).items():
            ev: PartitionEvidence | None = None
            for seq in range(lo, hi + 1):
                try:
                    meta = self._meta(rt, p, seq)
                except SegmentMissingError:
                    if not refreshed:
                        rt.registry.refresh()
                        refreshed = True
                    ev = ev or self._evidence(rt, p)
                    found = ev.classify(seq)
                    if found is None:  # published since our first look
                        try:
                            meta = self._meta(rt, p, seq)
                        except SegmentMissingError:
                            found = MissingSegment(p, seq, MISSING)
                    if found is not None and found.kind == DELETED:
                        log.warning(
                            "quiver.source.segment_dropped partition=%s seq=%d subscriber=%s",
                            p,
                            seq,
                            sub,
                        )
                        record_data_loss(rt.store.root, sub, p, seq, "dropped", skipped=True)
                        rt.metrics.inc(SOURCE_DROPPED, subscriber=sub)
                        continue
                    if found is not None:
                        self._lost(rt, p, seq, found.kind, found.describe(), found.evidence)
                        continue
                if meta is None:
                    e = rt.meta_errors.get((p, seq))
                    where = e.path if e is not None else None
                    self._lost(rt, p, seq, "corrupt", f"its .meta fails verification: {e}", where)
                    continue
                out.extend(self._splits(meta, rt.store, sub))
        return out

    # -- commit ---------------------------------------------------------------------------
    def commit(self, end: dict[str, Any]) -> None:
        """Ack every segment up to ``end`` for the subscriber, then run retention.

        Idempotent and replay-safe: seqs already done are not recorded again, and an
        older ``end`` acks nothing new. Seqs never published (holes) are acked too, so
        the subscriber's mark moves past them.
        """
        rt = self._runtime()
        sub = self.opts.subscriber
        assert sub is not None
        stop = QuiverOffset.from_json(end)
        rt.registry.refresh()
        todo: dict[str, list[int]] = {}
        for p, hi in stop.segments.items():
            lo = rt.registry.hwm(sub, p) + 1
            seqs = [s for s in range(lo, hi + 1) if not rt.registry.is_done(sub, p, s)]
            if seqs:
                todo[p] = seqs
        if todo:
            rt.registry.record_many(sub, todo, Outcome.ACK)
            rt.metrics.inc(SOURCE_ACKED, sum(len(v) for v in todo.values()), subscriber=sub)
        deleted = 0
        now = time.monotonic()
        if todo or now - rt.last_retention >= RETENTION_IDLE_PERIOD_S:
            rt.last_retention = now
            result = apply_retention(
                rt.store.segment_location,
                rt.registry,
                self.config.retention,
                time.time_ns(),
                metrics=rt.metrics,
            )
            deleted = sum(len(v) for v in result.deleted.values())
        rt.metas = {k: v for k, v in rt.metas.items() if not stop.covers(*k)}
        rt.meta_errors = {k: v for k, v in rt.meta_errors.items() if not stop.covers(*k)}
        if todo or deleted:
            log.info(
                "quiver.source.commit subscriber=%s end=%s acked=%d deleted=%d",
                sub,
                stop.segments,
                sum(len(v) for v in todo.values()),
                deleted,
            )

    def stop(self) -> None:
        rt, self._rt = self._rt, None
        if rt is None:
            return
        try:
            rt.registry.close()
            rt.store.close()
        finally:
            assert self.opts.subscriber is not None
            _release_live(rt.store.root, self.opts.subscriber, id(self))
        log.info("quiver.source.stop subscriber=%s", self.opts.subscriber)


# -- batch reads ----------------------------------------------------------------------------
_OPS = (FilterEqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)


def _physical(value: Any, typ: pa.DataType | None) -> int | None:
    """A filter literal as the physical int segment metadata keeps for a column."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if typ is None:
        return None
    try:
        if isinstance(value, dt.datetime) and pa.types.is_timestamp(typ):
            if value.tzinfo is None and typ.tz is not None:
                value = value.replace(tzinfo=dt.UTC)
            return pa.scalar(value, pa.timestamp(typ.unit, tz=typ.tz)).cast(pa.int64()).as_py()
        if isinstance(value, dt.date) and pa.types.is_date(typ):
            return (
                pa.scalar(value, typ)
                .cast(pa.int32() if pa.types.is_date32(typ) else pa.int64())
                .as_py()
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    return None


@dataclass(frozen=True)
class _Prune:
    """One pushed filter usable against segment min/max: ``column op value(s)``."""

    column: str
    op: str
    values: tuple[int, ...]

    def may_match(self, lo: int | None, hi: int | None) -> bool:
        if lo is None or hi is None:
            return True  # no statistics: keep
        v = self.values
        if self.op == "eq":
            return lo <= v[0] <= hi
        if self.op == "in":
            return any(lo <= x <= hi for x in v)
        if self.op == "gt":
            return hi > v[0]
        if self.op == "ge":
            return hi >= v[0]
        if self.op == "lt":
            return lo < v[0]
        return lo <= v[0]  # le


def _to_prune(f: Filter, arrow: pa.Schema | None) -> _Prune | None:
    """A pushed comparison usable against segment statistics, or None.

    Any integer, timestamp or date column of the store qualifies; a segment is only
    pruned by it when that column is the segment's ``event_time_column``.
    """
    if not isinstance(f, _OPS) or len(f.attribute) != 1:
        return None
    col = f.attribute[0]
    typ: pa.DataType | None = None
    if col == META_INGESTION_TIME:
        typ = pa.timestamp("ns", tz="UTC")
    elif arrow is not None and (idx := arrow.get_field_index(col)) >= 0:
        typ = arrow.field(idx).type
        if not (pa.types.is_integer(typ) or pa.types.is_timestamp(typ) or pa.types.is_date(typ)):
            return None
    if typ is None:
        return None
    raw = list(f.value) if isinstance(f, In) else [f.value]
    vals = [_physical(v, typ) for v in raw]
    if not vals or any(v is None for v in vals):
        return None
    op = {
        FilterEqualTo: "eq",
        In: "in",
        GreaterThan: "gt",
        GreaterThanOrEqual: "ge",
        LessThan: "lt",
        LessThanOrEqual: "le",
    }[type(f)]
    return _Prune(col, op, tuple(v for v in vals if v is not None))


class QuiverBatchReader(_QuiverReading, DataSourceReader):
    """Reads every retained segment; prunes segments by event time and ingestion time.

    ``pushFilters`` (needs ``spark.sql.python.filterPushdown.enabled=true``) keeps
    comparisons on the store's ``eventTimeColumn`` and on ``_quiver_ingestion_time``
    to skip whole segments whose min/max cannot match. Every filter is handed back to
    Spark, which still evaluates it row by row: pruning only saves reads.
    """

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._init_reading(options, schema, streaming=False)
        self.prunes: list[_Prune] = []

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        store = _open_store(self.opts, self.config)
        try:
            arrow = store.schema()
        finally:
            store.close()
        for f in filters:
            pr = _to_prune(f, arrow)
            if pr is not None:
                self.prunes.append(pr)
            yield f

    def _keep(self, meta: SegmentMeta) -> bool:
        for pr in self.prunes:
            if pr.column == META_INGESTION_TIME:
                # every row's value is max_ingestion_ns truncated to microseconds
                ns = meta.max_ingestion_ns // 1000 * 1000
                if not pr.may_match(ns, ns):
                    return False
            elif meta.event_time_column == pr.column and not pr.may_match(
                meta.min_event_time, meta.max_event_time
            ):
                return False
        return True

    def partitions(self) -> Sequence[InputPartition]:
        store = _open_store(self.opts, self.config)
        try:
            out: list[InputPartition] = []
            total = kept = 0
            registry = _registry_if_any(store.root)
            try:
                found = {
                    p: evidence(store.segment_location, registry, p) for p in store.partitions()
                }
            finally:
                if registry is not None:
                    registry.close()
            for p, ev in found.items():
                for lost in ev.losses():  # published once, neither there nor deleted
                    record_data_loss(
                        store.root,
                        None,
                        p,
                        lost.seq,
                        lost.kind,
                        skipped=not self.opts.fail_on_data_loss,
                        evidence=lost.evidence,
                    )
                    if self.opts.fail_on_data_loss:
                        raise lost.error("set failOnDataLoss=false to skip it and count the loss")
                    log.warning(
                        "quiver.source.data_loss partition=%s seq=%d reason=%s",
                        p,
                        lost.seq,
                        lost.kind,
                    )
                for seq in sorted(ev.published):
                    try:
                        meta = store.segment_location.read_meta(p, seq)
                    except SegmentMissingError:
                        continue
                    except CorruptionError as e:
                        record_data_loss(
                            store.root,
                            None,
                            p,
                            seq,
                            "corrupt",
                            skipped=not self.opts.fail_on_data_loss,
                            evidence=e.path,
                        )
                        if self.opts.fail_on_data_loss:
                            raise DataLossError(
                                p, seq, f"corrupt ({e})", kind="corrupt", evidence=e.path
                            ) from e
                        log.warning(
                            "quiver.source.data_loss partition=%s seq=%d reason=corrupt", p, seq
                        )
                        continue
                    total += 1
                    if not self._keep(meta):
                        continue
                    kept += 1
                    out.extend(self._splits(meta, store, None))
            log.info(
                "quiver.source.batch_plan segments=%d kept=%d filters=%d",
                total,
                kept,
                len(self.prunes),
            )
            return out
        finally:
            store.close()
