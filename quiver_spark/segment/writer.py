"""Turning WAL batches into the bytes of a segment file (ARCHITECTURE.md §5.1, §5.2).

No file system calls here: :func:`serialize` hands every byte of the Arrow IPC file
to a ``consume`` callback (a local fd through :class:`~quiver_spark.fs.FileIO`, or an
in-memory buffer for fsspec) while computing its CRC-32C on the way, so the file is
checksummed without being read back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..errors import ConfigError, InvalidArgumentError, SchemaMismatchError
from ..format import checksum
from ..option_table import SEGMENT_EVENT_TIME_COLUMN

log = logging.getLogger(__name__)

COMPRESSIONS = (None, "lz4", "zstd")
"""Allowed IPC body compressions; ``None`` (the default) writes uncompressed buffers."""

_SMALL_WRITE = 64 * 1024
_FLUSH_AT = 1024 * 1024


@dataclass(frozen=True)
class Serialized:
    """What :func:`serialize` wrote: file size, CRC-32C, batch and row counts."""

    size_bytes: int
    checksum: int
    batches: int
    rows: int


def prepare(batches: list[pa.RecordBatch]) -> pa.Table:
    """One table over ``batches`` with dictionaries unified across all of them.

    Arrow IPC files allow one dictionary per field for the whole file (no
    replacements), so dictionary-encoded columns, nested ones included, are
    rewritten to share a single unified dictionary; indices are transposed. Tables
    without dictionary columns are returned without copying.
    """
    if not batches:
        raise InvalidArgumentError(
            "batches",
            0,
            "at least one record batch",
            "a segment needs at least one record batch (it carries the schema)",
        )
    try:
        table = pa.Table.from_batches(batches)
    except pa.ArrowInvalid as e:
        raise SchemaMismatchError(batches[0].schema, _first_other(batches), str(e)) from e
    if _has_dictionary(table.schema):
        try:
            table = table.unify_dictionaries()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(table.schema, table.schema, f"cannot unify: {e}") from e
    return table


def coalesce(table: pa.Table, target_rows: int) -> Iterator[pa.RecordBatch]:
    """Yield the table's batches, consecutive small ones concatenated.

    Batches are gathered in order until they hold at least ``target_rows`` rows, then
    emitted as one batch (``pa.concat_batches``); a batch already at or above the
    target is emitted as is (never split, so no copy). Empty batches are dropped,
    but an empty table still yields nothing and the file keeps its schema.
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= target_rows:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def event_time_range(table: pa.Table, column: str | None) -> tuple[int | None, int | None]:
    """Min and max physical value of ``column`` (nulls ignored); ``(None, None)`` if none.

    Timestamps give their int64 value in their own unit, date32 days, date64
    milliseconds, integers themselves.
    """
    if column is None:
        return None, None
    allowed = "a top-level timestamp, date or integer column of the segment schema"
    if column not in table.schema.names:
        raise ConfigError(SEGMENT_EVENT_TIME_COLUMN, column, allowed)
    dtype = table.schema.field(column).type
    if pa.types.is_date32(dtype):
        physical = pa.int32()
    elif pa.types.is_timestamp(dtype) or pa.types.is_date64(dtype) or pa.types.is_integer(dtype):
        physical = pa.int64()
    else:
        raise ConfigError(SEGMENT_EVENT_TIME_COLUMN, f"{column} ({dtype})", allowed)
    bounds = pc.min_max(table.column(column))
    lo, hi = bounds["min"], bounds["max"]
    if not lo.is_valid:
        return None, None
    try:
        return lo.cast(physical).as_py(), hi.cast(physical).as_py()
    except pa.ArrowInvalid as e:  # uint64 beyond int64
        raise ConfigError(SEGMENT_EVENT_TIME_COLUMN, column, "values that fit in int64") from e


def serialize(
    consume: Callable[[memoryview], None],
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    *,
    compression: str | None = None,
) -> Serialized:
    """Write an Arrow IPC *file* of ``batches`` through ``consume``; return its stats.

    ``consume`` receives every byte exactly once, in order; it must write them all
    or raise. The CRC-32C is computed on the same buffers (no second pass).
    """
    if compression not in COMPRESSIONS:
        raise ConfigError("segment.compression", compression, "none, lz4 or zstd")
    sink = _CrcSink(consume)
    options = ipc.IpcWriteOptions(compression=compression)
    n_batches = rows = 0
    with pa.PythonFile(sink, mode="w") as stream:
        with ipc.new_file(stream, schema, options=options) as writer:
            for batch in batches:
                writer.write_batch(batch)
                n_batches += 1
                rows += batch.num_rows
    sink.flush()
    return Serialized(sink.size, sink.crc, n_batches, rows)


class _CrcSink:
    """A write-only file object for ``pa.PythonFile``: CRC, count, buffer small writes."""

    closed = False

    def __init__(self, consume: Callable[[memoryview], None]) -> None:
        self._consume = consume
        self._buf = bytearray()
        self.crc = 0
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | pa.Buffer) -> int:
        view = memoryview(data)
        n = view.nbytes
        self.crc = checksum(view, self.crc)
        self.size += n
        if n < _SMALL_WRITE:
            self._buf += view
            if len(self._buf) >= _FLUSH_AT:
                self.flush()
        else:
            self.flush()
            self._consume(view)
        return n

    def flush(self) -> None:
        if self._buf:
            data, self._buf = self._buf, bytearray()
            self._consume(memoryview(data))

    def close(self) -> None:
        self.closed = True


def _has_dictionary(schema: pa.Schema) -> bool:
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            return True
        return any(walk(t.field(i).type) for i in range(t.num_fields))

    return any(walk(f.type) for f in schema)


def _first_other(batches: list[pa.RecordBatch]) -> pa.Schema:
    first = batches[0].schema
    return next((b.schema for b in batches if not b.schema.equals(first)), first)
