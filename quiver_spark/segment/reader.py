"""Reading a finalized segment after verifying it (ARCHITECTURE.md §5.1, §11.2).

:func:`open_verified` takes the file's bytes as one Arrow buffer (a zero-copy view of
a memory map for local files, an in-memory copy for fsspec ones) and checks size,
CRC-32C, footer and schema *before* a :class:`SegmentReader` exists, so no batch of
a damaged file is ever served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import TracebackType

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import ChecksumMismatchError, CorruptionError, SegmentReaderClosedError
from ..format import checksum
from .meta import SegmentMeta, schema_fingerprint

log = logging.getLogger(__name__)


def verify(path: str, data: pa.Buffer, meta: SegmentMeta) -> None:
    """Raise CorruptionError unless ``data`` has the size and CRC-32C in ``meta``."""
    if data.size != meta.size_bytes:
        log.warning(
            "quiver.segment.verify_failed path=%s size=%d expected=%d",
            path,
            data.size,
            meta.size_bytes,
        )
        raise CorruptionError(
            path,
            min(data.size, meta.size_bytes),
            f"segment size {data.size} differs from published size {meta.size_bytes}",
        )
    computed = checksum(memoryview(data))
    if computed != meta.checksum:
        log.warning(
            "quiver.segment.verify_failed path=%s crc=0x%08x expected=0x%08x",
            path,
            computed,
            meta.checksum,
        )
        raise ChecksumMismatchError(path, 0, "segment", meta.checksum, computed)


def open_verified(
    path: str, data: pa.Buffer, meta: SegmentMeta, *, verify_crc: bool
) -> SegmentReader:
    """Verify ``data`` (unless ``verify_crc`` is false) and wrap it in a reader.

    Without ``verify_crc`` the footer and schema are still checked, but a flipped
    bit inside a batch body goes unnoticed (Arrow IPC has no checksum of its own).
    """
    if verify_crc:
        verify(path, data, meta)
    try:
        file_reader = ipc.open_file(pa.BufferReader(data))
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise CorruptionError(path, data.size, f"not a readable Arrow IPC file: {e}") from e
    if schema_fingerprint(file_reader.schema) != meta.schema_fingerprint:
        raise CorruptionError(path, 0, "segment schema differs from its metadata fingerprint")
    if file_reader.num_record_batches != meta.batches:
        raise CorruptionError(
            path,
            data.size,
            f"segment has {file_reader.num_record_batches} batches, metadata says {meta.batches}",
        )
    return SegmentReader(path, meta, file_reader)


class SegmentReader:
    """Random and sequential access to the record batches of one verified segment.

    Batches of a local segment are zero-copy views of the memory map; they stay
    valid after :meth:`close` (the mapping lives as long as any buffer using it).
    Use as a context manager.

    Attributes
    ----------
    path
        Where the ``.arrow`` file is.
    schema
        The file's Arrow schema, including its key/value metadata.
    num_batches
        Number of record batches in the file.
    meta
        The published metadata the file was verified against.
    """

    def __init__(self, path: str, meta: SegmentMeta, reader: ipc.RecordBatchFileReader) -> None:
        self.path = path
        self.meta = meta
        self._reader: ipc.RecordBatchFileReader | None = reader
        self.schema: pa.Schema = reader.schema
        self.num_batches: int = reader.num_record_batches

    def _file(self) -> ipc.RecordBatchFileReader:
        if self._reader is None:
            raise SegmentReaderClosedError(self.path)
        return self._reader

    def read_batch(self, i: int) -> pa.RecordBatch:
        """The ``i``-th record batch (0-based); IndexError when out of range."""
        if not 0 <= i < self.num_batches:
            raise IndexError(f"batch {i} out of range (segment has {self.num_batches})")
        try:
            return self._file().get_batch(i)
        except (pa.ArrowInvalid, pa.ArrowIOError) as e:
            raise CorruptionError(self.path, 0, f"batch {i} unreadable: {e}") from e

    def batches(self, start: int = 0, stop: int | None = None) -> Iterator[pa.RecordBatch]:
        """Yield batches ``start`` (inclusive) to ``stop`` (exclusive, default: all)."""
        end = self.num_batches if stop is None else min(stop, self.num_batches)
        for i in range(max(start, 0), end):
            yield self.read_batch(i)

    def read_all(self) -> pa.Table:
        """All batches as one table (no copy of the column data)."""
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)

    def close(self) -> None:
        """Drop the file reader; batches already returned remain valid."""
        self._reader = None

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
