"""Reading the write-ahead log: verify, classify damage, cut torn tails (ARCHITECTURE.md §4.2).

Every record's CRC-32C is verified. The rule that separates a torn tail from
corruption: a bad spot in the **last** file is a torn tail when no verifiable record
follows it (truncated record, a bad final record, zeros, garbage up to EOF); anything
else bad is corruption, reported with file and offset. ``salvage=True`` turns
corruption into counted skips: the scan resynchronises on the next verifiable record
(see :func:`_next_valid`).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgpack
import pyarrow as pa

from .. import layout
from ..errors import ChecksumMismatchError, CorruptionError, VersionError
from ..format import (
    REC_BATCH,
    REC_SCHEMA,
    REC_STREAM,
    REC_TXN,
    RECORD_TYPES,
    WAL_HEADER_SIZE,
    WAL_MAGIC,
    WAL_RECORD,
    WAL_RECORD_SIZE,
    checksum,
    decode_wal_header,
)
from ..fs import DEFAULT_IO, FileIO
from .writer import WalFileInfo, list_wal_files

log = logging.getLogger(__name__)

# Bytes 8..12 of every v1 record header: type in 1..4, flags 0, reserved 0.
_HEADER_TAIL = re.compile(rb"[\x01-\x04]\x00\x00\x00")
_SEQ = struct.Struct("<Q")


@dataclass(frozen=True)
class WalRecord:
    """One verified record; ``payload`` is a view into the file's memory map."""

    path: str
    offset: int
    rtype: int
    seq: int
    ingestion_ns: int
    txn_id: int
    payload: memoryview


@dataclass
class WalScan:
    """Result of scanning one file.

    ``valid_bytes`` is the offset just past the last good record (or past the header
    when there is none); ``torn_bytes`` the length of a torn tail (last file only);
    ``skipped`` the ``(offset, reason)`` of each damaged spot passed over in salvage
    mode. ``first_seq`` is the header's first record seq (from the file name when the
    header itself was damaged).
    """

    path: str
    records: list[WalRecord]
    valid_bytes: int
    torn_bytes: int
    skipped: list[tuple[int, str]]
    first_seq: int = 0


@dataclass
class WalRecovery:
    """Result of :func:`recover_wal`; ``torn`` lists ``(path, cut_at, bytes_cut)``.

    A removed header-only last file is reported as ``(path, 0, size)`` when its header
    was torn. ``next_record_seq`` is 1 when the directory holds no WAL file: the
    caller keeps its own durable floor.
    """

    files: list[WalFileInfo]
    scans: list[WalScan]
    torn: list[tuple[str, int, int]]
    next_record_seq: int
    removed: list[str] = field(default_factory=list)

    def records(self) -> Iterator[WalRecord]:
        """All recovered records in seq order."""
        for scan in self.scans:
            yield from scan.records


def _read_at(mv: memoryview, path: str, off: int, size: int) -> WalRecord | CorruptionError:
    """The verified record at ``off`` or the error describing why it is not one."""
    left = size - off
    if left < WAL_RECORD_SIZE:
        return CorruptionError(path, off, f"wal record header truncated ({left} of 36 bytes)")
    crc, plen, rtype, flags, reserved, seq, ingestion_ns, txn_id = WAL_RECORD.unpack_from(mv, off)
    end = off + WAL_RECORD_SIZE + plen
    if end > size:
        return CorruptionError(
            path, off, f"wal record truncated: payload_len {plen} but {left - 36} bytes left"
        )
    computed = checksum(mv[off + WAL_RECORD_SIZE : end], checksum(mv[off + 4 : off + 36]))
    if computed != crc:
        return ChecksumMismatchError(path, off, "wal record", crc, computed)
    if rtype not in RECORD_TYPES or flags or reserved:
        return CorruptionError(path, off, f"wal record type {rtype} flags {flags} unknown")
    payload = mv[off + WAL_RECORD_SIZE : end]
    return WalRecord(path, off, rtype, seq, ingestion_ns, txn_id, payload)


def _next_valid(mv: memoryview, path: str, start: int, size: int, min_seq: int) -> WalRecord | None:
    """The first verifiable record at an offset >= ``start`` (the resync rule).

    Candidates are offsets whose bytes 8..12 read ``type in 1..4, 0, 0, 0`` and whose
    seq lies in ``[min_seq, min_seq + (size - start) // 36]`` (every later record is
    at least 36 bytes, so no genuine successor falls outside); the first candidate
    whose whole record verifies wins.
    """
    max_seq = min_seq + (size - start) // WAL_RECORD_SIZE + 1
    for m in _HEADER_TAIL.finditer(mv, start + 8, size):
        p = m.start() - 8
        if size - p < WAL_RECORD_SIZE:
            break
        (seq,) = _SEQ.unpack_from(mv, p + 12)
        if min_seq <= seq <= max_seq:
            rec = _read_at(mv, path, p, size)
            if isinstance(rec, WalRecord):
                return rec
    return None


def _map(path: str, io: FileIO) -> tuple[memoryview, int]:
    io.before("read", path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b""), 0
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)), size


def scan_wal_file(
    path: str,
    *,
    last: bool,
    salvage: bool = False,
    io: FileIO = DEFAULT_IO,
    upto: int | None = None,
) -> WalScan:
    """Verify every record of one WAL file (up to record ``upto`` when given).

    Parameters
    ----------
    path
        The ``.wal`` file; read through a read-only memory map.
    last
        Whether this is the partition's newest file: only there is a bad tail torn.
    salvage
        Count damage in ``skipped`` and resynchronise instead of raising.
    upto
        The file's cut from STATE's ``wal_limit`` (ARCHITECTURE.md §6.1): the scan
        ends after the record of that seq; the bytes after it are never read.

    Raises
    ------
    CorruptionError, ChecksumMismatchError
        Damage that is not a torn tail, naming the file and offset.
    VersionError
        A WAL header with a valid checksum but a format version this build cannot read.
    """
    mv, size = _map(path, io)
    name_seq = layout.parse_wal_file(os.path.basename(path))
    scan = WalScan(path, [], 0, 0, [], first_seq=name_seq or 0)
    off, expected, bad = _read_header(mv, path, size, name_seq)
    while True:
        if bad is not None:
            nxt = _next_valid(mv, path, bad.offset + 1, size, expected)
            if nxt is None and last:
                scan.valid_bytes, scan.torn_bytes = off, size - off
                return scan
            if not salvage:
                raise bad
            scan.skipped.append((bad.offset, bad.reason))
            log.warning("quiver.wal.skip %s:%d %s", path, bad.offset, bad.reason)
            if nxt is None:
                scan.valid_bytes = off
                return scan
            off, expected = nxt.offset, nxt.seq
            bad = None
        if off >= size:
            scan.valid_bytes = off
            return scan
        rec = _read_at(mv, path, off, size)
        if isinstance(rec, CorruptionError):
            bad = rec
            continue
        end = off + WAL_RECORD_SIZE + len(rec.payload)
        if rec.seq != expected:
            reason = f"wal record seq {rec.seq}, expected {expected}"
            if not salvage:
                raise CorruptionError(path, off, reason)
            scan.skipped.append((off, reason))
            if rec.seq < expected:  # a stale or repeated record: drop it
                off = end
                continue
        scan.records.append(rec)
        off, expected = end, rec.seq + 1
        if upto is not None and rec.seq >= upto:
            scan.valid_bytes = off
            return scan


def _read_header(
    mv: memoryview, path: str, size: int, name_seq: int | None
) -> tuple[int, int, CorruptionError | None]:
    """``(records_offset, first_seq, damage)``; damage makes the caller resync at 0."""
    try:
        hsize, first, _ = decode_wal_header(path, bytes(mv[:WAL_HEADER_SIZE]))
    except VersionError as e:
        if bytes(mv[:4]) == WAL_MAGIC and size >= WAL_HEADER_SIZE:
            raise  # a readable header of another format version: never guess
        return 0, name_seq or 1, e
    except CorruptionError as e:
        return 0, name_seq or 1, e
    if hsize < WAL_HEADER_SIZE or hsize > size:
        return 0, name_seq or first, CorruptionError(path, 6, f"wal header_size {hsize} invalid")
    if name_seq is not None and first != name_seq:
        return (
            0,
            name_seq,
            CorruptionError(
                path, 8, f"wal header first_record_seq {first} differs from the file name"
            ),
        )
    return hsize, first, None


def recover_wal(
    wal_dir: str,
    *,
    salvage: bool = False,
    io: FileIO = DEFAULT_IO,
    covered: Callable[[int, int], bool] | None = None,
    limits: dict[int, int] | None = None,
) -> WalRecovery:
    """Scan all WAL files of a partition in order and repair the torn tail.

    Removes stale ``*.tmp`` files; verifies every file (only the last may be torn) and
    seq continuity across files; cuts a torn tail (truncate + fsync, reported);
    removes a last file holding no record (only a header, possibly torn).
    ``covered(lo, hi)`` says whether records ``lo..hi`` are inside durable segments:
    a file deleted for that reason between two kept files is not a break in continuity
    (an earlier file kept by an undecided transaction, ARCHITECTURE.md §4.2 Rotation).
    ``limits`` maps a file's first seq to the last seq read from it (STATE's
    ``wal_limit``: a file cut after a failed write or fsync, §9.4).

    Raises
    ------
    CorruptionError
        Any damage but a torn tail, unless ``salvage`` (then counted in the scans).
    """
    tmps = [os.path.join(wal_dir, n) for n in io.listdir(wal_dir) if layout.is_tmp(n)]
    if tmps:
        io.durable_unlink(tmps)
        log.info("quiver.wal.remove_tmp %s", tmps)
    infos = list_wal_files(wal_dir, io)
    limits = limits or {}
    scans = [
        scan_wal_file(
            f.path,
            last=i == len(infos) - 1,
            salvage=salvage,
            io=io,
            upto=limits.get(f.first_seq),
        )
        for i, f in enumerate(infos)
    ]
    expected: int | None = None
    next_seq = 1
    for scan in scans:
        gap_covered = (
            expected is not None
            and covered is not None
            and scan.first_seq > expected
            and covered(expected, scan.first_seq - 1)
        )
        if expected is not None and scan.first_seq != expected and not gap_covered:
            reason = (
                f"wal files not contiguous: expected first seq {expected}, found {scan.first_seq}"
            )
            if not salvage:
                raise CorruptionError(scan.path, 0, reason)
            scan.skipped.insert(0, (0, reason))
        expected = scan.records[-1].seq + 1 if scan.records else scan.first_seq
        next_seq = max(next_seq, expected)
    torn: list[tuple[str, int, int]] = []
    removed: list[str] = []
    if scans:
        last, info = scans[-1], infos[-1]
        if not last.records:
            io.durable_unlink([info.path])
            removed.append(info.path)
            if last.torn_bytes:
                torn.append((info.path, 0, info.size))
            (log.warning if last.torn_bytes else log.info)(
                "quiver.wal.remove_empty %s size=%d torn=%d", info.path, info.size, last.torn_bytes
            )
            scans.pop()
            infos.pop()
        elif last.torn_bytes:
            io.truncate(info.path, last.valid_bytes)
            fd = io.open_append(info.path)
            try:
                io.fsync(fd)
            finally:
                io.close(fd)
            torn.append((info.path, last.valid_bytes, last.torn_bytes))
            infos[-1] = WalFileInfo(info.first_seq, info.path, last.valid_bytes)
            log.warning(
                "quiver.wal.truncate %s cut_at=%d bytes=%d",
                info.path,
                last.valid_bytes,
                last.torn_bytes,
            )
    return WalRecovery(infos, scans, torn, next_seq, removed)


def wal_limits(path: str, state: dict) -> dict[int, int]:
    """STATE's ``wal_limit`` (§6.1) as ``{first seq of a WAL file: last seq read}``.

    Absent in a STATE written before the field existed: then no file is cut.
    """
    raw = state.get("wal_limit")
    if raw is None:
        return {}
    try:
        out = {int(first): int(upto) for first, upto in raw}
    except (TypeError, ValueError) as e:
        raise CorruptionError(
            path, 16, f"STATE wal_limit {raw!r} is not a list of [first_seq, last_seq] pairs"
        ) from e
    return out


class WalDecoder:
    """Turns WAL records into Arrow batches, keeping the schema of the current file.

    The schema is per file: it resets when records of another file arrive.
    """

    def __init__(self) -> None:
        self._path: str | None = None
        self._schema: pa.Schema | None = None

    @property
    def schema(self) -> pa.Schema | None:
        """Schema in force for the file of the last record decoded."""
        return self._schema

    def decode(self, rec: WalRecord) -> pa.RecordBatch | None:
        """The batch of a ``REC_BATCH``/``REC_STREAM`` record, None for the others.

        Batches are zero-copy views of the record's payload (the file's memory map).
        """
        if rec.path != self._path:
            self._path, self._schema = rec.path, None
        try:
            if rec.rtype == REC_SCHEMA:
                self._schema = pa.ipc.read_schema(pa.py_buffer(rec.payload))
                return None
            if rec.rtype == REC_BATCH:
                if self._schema is None:
                    raise CorruptionError(rec.path, rec.offset, "wal batch record before a schema")
                return pa.ipc.read_record_batch(pa.py_buffer(rec.payload), self._schema)
            if rec.rtype == REC_STREAM:
                batches = list(pa.ipc.open_stream(pa.py_buffer(rec.payload)))
                if len(batches) != 1:
                    raise CorruptionError(
                        rec.path, rec.offset, f"wal stream record holds {len(batches)} batches"
                    )
                return batches[0]
        except pa.ArrowException as e:
            raise CorruptionError(rec.path, rec.offset, f"undecodable wal record: {e}") from e
        if rec.rtype == REC_TXN:
            return None
        raise CorruptionError(rec.path, rec.offset, f"wal record type {rec.rtype} unknown")


def decode_txn(rec: WalRecord) -> dict[str, object]:
    """The ``{"app", "version", "tag"}`` map of a ``REC_TXN`` record."""
    try:
        obj = msgpack.unpackb(rec.payload, raw=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise CorruptionError(rec.path, rec.offset, f"undecodable wal txn record: {e}") from e
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("app"), str)
        or not isinstance(obj.get("version"), int)
        or not isinstance(obj.get("tag", ""), str)
    ):
        raise CorruptionError(rec.path, rec.offset, f"malformed wal txn record: {obj!r}")
    return obj
