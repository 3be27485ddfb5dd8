"""The executor side of the Quiver source: input splits, schema conversion, ``read``.

Everything a read task needs travels in its :class:`QuiverInputPartition` (the reader
object is pickled once at query start, before any planning happens): record-batch
ranges of one or more segments (small segments are packed into one task, large ones
split, see :func:`pack_read_tasks`). A task opens each segment through :class:`~quiver_spark.segment.SegmentLocation` (zero-copy memory map
for local segments, one fetch through fsspec otherwise), which verifies size and
CRC-32C before a single batch exists, so a corrupt segment is never served.

Metadata columns (``includeMetadata``) cost no stored bytes: ``_quiver_partition``
and ``_quiver_segment`` come from the segment's identity, ``_quiver_row`` is the row's
0-based position in the segment, and ``_quiver_ingestion_time`` is the segment's
``max_ingestion_ns``: the time by which every row of the segment had been ingested
(an upper bound of the row's own ingestion time, exact to the segment).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from ..dataloss import LossPolicy, LostLog
from ..errors import (
    ConfigError,
    CorruptionError,
    DataLossError,
    ReadSchemaError,
    SchemaUnavailableError,
)
from ..format import SEGMENTS_DIR
from ..objects.urls import open_objects
from ..segment import SegmentLocation, SegmentMeta
from ..segment.urls import is_object_root
from ..store import QuiverStore
from ..subscription import open_store
from .options import store_config
from .source_options import parse_source_options

log = logging.getLogger(__name__)

META_PARTITION = "_quiver_partition"
META_SEGMENT = "_quiver_segment"
META_ROW = "_quiver_row"
META_INGESTION_TIME = "_quiver_ingestion_time"
METADATA_FIELDS = (
    StructField(META_PARTITION, StringType(), False),
    StructField(META_SEGMENT, LongType(), False),
    StructField(META_ROW, LongType(), False),
    StructField(META_INGESTION_TIME, TimestampType(), False),
)
METADATA_NAMES = frozenset(f.name for f in METADATA_FIELDS)

_UNSIGNED = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
}


# -- schema ------------------------------------------------------------------------------
def _sparkable(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _sparkable(t.value_type)
    if t in _UNSIGNED:
        return _UNSIGNED[t]
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_sparkable(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_sparkable(f.type)) for f in t])
    return t


def _nullable(f: pa.Field) -> pa.Field:
    """``f`` and every field nested in it nullable."""
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(c) for c in t])
    elif pa.types.is_list(t):
        t = pa.list_(_nullable(t.value_field))
    return f.with_type(t).with_nullable(True)


def spark_schema_of(arrow: pa.Schema, include_metadata: bool) -> StructType:
    """The Spark schema of a store's Arrow schema (plus the metadata columns if asked).

    Dictionary columns read as their values, unsigned integers as the next wider
    signed type (``uint64`` as ``decimal(20,0)``), nanosecond timestamps as Spark's
    microsecond timestamps (truncated in :func:`conform`). Every column reads as
    nullable: the store accepts a later segment whose columns differ only in
    nullability (ARCHITECTURE.md §5), so a column recorded ``not null`` may hold nulls.
    """
    fields = []
    for f in arrow.remove_metadata():
        try:
            wide = _nullable(f.with_type(_sparkable(f.type)))
            fields.extend(from_arrow_schema(pa.schema([wide])).fields)
        except Exception as e:  # pyspark raises several types for unsupported types
            raise ConfigError(
                "schema", f"{f.name}: {f.type}", f"a column type Spark can read ({e})"
            ) from e
    if include_metadata:
        taken = {f.name for f in fields} & METADATA_NAMES
        if taken:
            raise ConfigError(
                "includeMetadata", "true", f"a store without columns named {sorted(taken)}"
            )
        fields.extend(METADATA_FIELDS)
    return StructType(fields)


def arrow_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects from ``read()`` for ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def store_spark_schema(options: Mapping[str, Any]) -> StructType:
    """The Spark schema of the store named by ``options`` (``DataSource.schema()``).

    Raises
    ------
    SchemaUnavailableError
        The store exists but nothing was written yet, so it has no schema.
    """
    opts = parse_source_options(options, streaming=None)  # a stream's or a batch read's
    store = open_store(opts.path, store_config(options), opts.storage_options)
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


# -- input partitions --------------------------------------------------------------------
Piece = tuple[SegmentMeta, int, int]
"""Record batches ``[start, stop)`` of one segment: what a read task reads of it."""

OPEN_COST_BYTES = 4 * 1024 * 1024
"""What opening one segment counts for when small segments are packed into read tasks
(as Spark's ``spark.sql.files.openCostInBytes``): many tiny segments still make
several tasks instead of one."""


class QuiverInputPartition(InputPartition):
    """One read task: record-batch ranges of one or more segments, read in order.

    Attributes
    ----------
    pieces
        ``(meta, batch_start, batch_stop)`` per segment: the published metadata the
        segment is verified against and the record-batch range read from it (the
        whole segment unless a large one was split).
    segments_url, storage_options
        Where segments live and how to reach them (fsspec).
    root, subscriber, fail_on_data_loss
        Data-loss handling: where to record a skipped segment and whether to fail.
    """

    def __init__(
        self,
        pieces: Sequence[Piece],
        *,
        segments_url: str,
        storage_options: Mapping[str, Any] | None,
        root: str,
        subscriber: str | None,
        fail_on_data_loss: bool,
    ) -> None:
        if not pieces:
            raise ValueError("a read task reads at least one segment")
        super().__init__(tuple((m.partition, m.seq, b0) for m, b0, _ in pieces))
        self.pieces: list[Piece] = list(pieces)
        self.segments_url = segments_url
        self.storage_options = dict(storage_options or {})
        self.root = root
        self.subscriber = subscriber
        self.fail_on_data_loss = fail_on_data_loss

    @property
    def metas(self) -> list[SegmentMeta]:
        """The segments this task reads (a split segment's once per range)."""
        return [m for m, _, _ in self.pieces]

    def __repr__(self) -> str:
        shown = ", ".join(f"{m.partition}/{m.seq} batches {b0}:{b1}" for m, b0, b1 in self.pieces)
        return f"QuiverInputPartition({shown})"


def split_segment(meta: SegmentMeta, split_size_bytes: int) -> list[tuple[int, int]]:
    """Record-batch ranges reading ``meta``: one range unless it exceeds the split size."""
    n = max(meta.batches, 1)
    parts = min(n, max(1, -(-meta.size_bytes // split_size_bytes)))
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def pack_read_tasks(
    metas: Sequence[SegmentMeta], split_size_bytes: int, *, min_tasks: int = 1
) -> list[list[Piece]]:
    """The read tasks of ``metas``: large segments split, small ones packed.

    A segment larger than the split size is read by several tasks, one per
    record-batch range of :func:`split_segment`. The other segments are packed,
    consecutive ones together, so that a micro-batch of many small segments does not
    pay Spark's fixed cost of a task per segment (~30 ms of wall time per task
    measured on local[2], as much as serving ~3 MB): into ``ceil(bytes /
    split_size_bytes)`` tasks of about equal bytes, each segment counting at least
    :data:`OPEN_COST_BYTES`, but never fewer tasks in all than ``min_tasks`` (the
    parallelism to keep) when there are enough segments.
    """
    tasks: list[list[Piece]] = []
    small: list[tuple[SegmentMeta, int]] = []
    for m in metas:
        ranges = split_segment(m, split_size_bytes)
        if len(ranges) > 1:
            tasks.extend([(m, b0, b1)] for b0, b1 in ranges)
        else:
            small.append((m, max(m.size_bytes, OPEN_COST_BYTES)))
    if not small:
        return tasks
    total = sum(cost for _, cost in small)
    wanted = max(-(-total // split_size_bytes), min_tasks - len(tasks))
    packs = max(1, min(len(small), wanted))  # never more groups than segments
    mids, done = [], 0
    for _, cost in small:  # each segment's middle, in cumulative bytes
        mids.append(2 * done + cost)
        done += cost
    # group k starts at the first segment whose middle passes k/packs of the bytes
    # (contiguous groups of about equal bytes), but at least one segment after group
    # k-1's start and early enough to leave one segment to each later group
    starts: list[int] = []
    for k in range(packs):
        want = bisect.bisect_left(mids, 2 * total * k / packs) if k else 0
        lo = starts[-1] + 1 if starts else 0
        starts.append(min(max(want, lo), len(small) - (packs - k)))
    bounds = [*starts, len(small)]
    return tasks + [
        [(m, 0, m.batches) for m, _ in small[bounds[k] : bounds[k + 1]]] for k in range(packs)
    ]


# -- data loss ---------------------------------------------------------------------------
def data_loss_report(root: str, subscriber: str | None) -> dict[str, Any]:
    """Segments a source skipped, deduplicated (see :meth:`LostLog.report`)."""
    return LostLog(root, subscriber).report()


# -- reading -----------------------------------------------------------------------------
def _filled(n: int, value: Any, typ: pa.DataType) -> pa.Array:
    return pc.fill_null(pa.nulls(n, typ), pa.scalar(value, typ))


def conform(
    batch: pa.RecordBatch, target: pa.Schema, meta: SegmentMeta, first_row: int
) -> pa.RecordBatch:
    """``batch`` with exactly the ``target`` schema (types, nullability, metadata columns)."""
    n = batch.num_rows
    if batch.schema.equals(target):
        return batch
    arrays: list[pa.Array] = []
    for f in target:
        if f.name == META_PARTITION:
            arr = _filled(n, meta.partition, f.type)
        elif f.name == META_SEGMENT:
            arr = _filled(n, meta.seq, f.type)
        elif f.name == META_ROW:
            ones = _filled(n, 1, pa.int64())
            arr = pc.add(pc.cumulative_sum(ones), first_row - 1) if n else pa.array([], pa.int64())
        elif f.name == META_INGESTION_TIME:
            arr = _filled(n, meta.max_ingestion_ns // 1000, f.type)
        else:
            idx = batch.schema.get_field_index(f.name)
            if idx < 0:
                arr = pa.nulls(n, f.type)
            else:
                arr = batch.column(idx)
                if not arr.type.equals(f.type):
                    # Spark timestamps are microseconds: truncating nanoseconds is expected
                    safe = not (pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(f.type))
                    arr = arr.cast(f.type, safe=safe)
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def read_partition(part: InputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the rows of one :class:`QuiverInputPartition`, verified, cast to ``target``.

    Segments are read one after the other; each is opened (size and CRC-32C checked
    against its metadata) before any of its rows is yielded, and one that cannot be
    read follows the data-loss policy (:meth:`LossPolicy.open`) on its own.
    """
    if not isinstance(part, QuiverInputPartition):
        return  # Spark's placeholder for a batch read with nothing to read
    objects = (
        open_objects(part.root, part.storage_options or None) if is_object_root(part.root) else None
    )
    location = (
        SegmentLocation(part.segments_url, objects=objects, prefix=SEGMENTS_DIR)
        if objects is not None
        else SegmentLocation(part.segments_url, storage_options=part.storage_options)
    )
    policy = LossPolicy(
        part.root, part.subscriber, fail_on_data_loss=part.fail_on_data_loss, objects=objects
    )
    numbered = META_ROW in target.names
    for meta, batch_start, batch_stop in part.pieces:
        reader = policy.open(location, meta)
        if reader is None:  # settled by the data-loss policy
            continue
        log.debug(
            "quiver.source.segment_open partition=%s seq=%d batches=%d:%d",
            meta.partition,
            meta.seq,
            batch_start,
            batch_stop,
        )
        with reader:
            # batches of a file already in the target schema are served as they are
            as_is = reader.schema.equals(target)
            row = 0
            if numbered:
                row = sum(reader.read_batch(i).num_rows for i in range(batch_start))
            try:
                for batch in reader.batches(batch_start, batch_stop):
                    yield batch if as_is else conform(batch, target, meta, row)
                    row += batch.num_rows
            except CorruptionError as e:  # unreachable after a verified open; never serve it
                raise DataLossError(meta.partition, meta.seq, f"corrupt ({e})") from e
