"""The executor side of the Quiver source: input splits, schema conversion, ``read``.

Everything a read task needs travels in its :class:`QuiverInputPartition` (the reader
object is pickled once at query start, before any planning happens): the engine's
:class:`~quiver_spark.subscription.read_tasks.ReadTask`, record-batch ranges of one or more segments
(small segments are packed into one task, large ones split, see
:func:`~quiver_spark.subscription.read_tasks.pack_read_tasks`). The engine serves it
(:func:`~quiver_spark.subscription.read_tasks.read_task`: each segment's size and CRC-32C verified
before a single batch exists, so a corrupt segment is never served); here its batches
get the exact Arrow schema Spark expects.

Metadata columns (``includeMetadata``) cost no stored bytes: ``_quiver_partition``
and ``_quiver_segment`` come from the segment's identity, ``_quiver_row`` is the row's
0-based position in the segment, and ``_quiver_ingestion_time`` is the segment's
``max_ingestion_ns``: the time by which every row of the segment had been ingested
(an upper bound of the row's own ingestion time, exact to the segment).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from ..errors import ConfigError, ReadSchemaError, SchemaUnavailableError
from ..store import QuiverStore
from ..subscription import SegmentMeta, open_store
from ..subscription.read_tasks import ReadTask, read_task
from .options import store_config
from .source_options import parse_source_options

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
class QuiverInputPartition(InputPartition):
    """One read task: the engine's :class:`~quiver_spark.subscription.read_tasks.ReadTask`
    (record-batch ranges of one or more segments, read in order, and where and how to
    read them)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(tuple((m.partition, m.seq, b0) for m, b0, _ in task.pieces))
        self.task = task

    @property
    def metas(self) -> list[SegmentMeta]:
        """The segments this task reads (a split segment's once per range)."""
        return self.task.metas

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{m.partition}/{m.seq} batches {b0}:{b1}" for m, b0, b1 in self.task.pieces
        )
        return f"QuiverInputPartition({shown})"


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

    The engine serves the task (:func:`~quiver_spark.subscription.read_tasks.read_task`): segments
    one after the other, each opened (size and CRC-32C checked against its metadata)
    before any of its rows, one that cannot be read settled by the data-loss policy
    on its own.
    """
    if not isinstance(part, QuiverInputPartition):
        return  # Spark's placeholder for a batch read with nothing to read
    numbered = META_ROW in target.names
    for meta, row, batch in read_task(part.task, row_numbers=numbered):
        yield conform(batch, target, meta, row)
