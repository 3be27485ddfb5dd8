"""On-disk constants and byte layouts. No I/O here.

Every layout below is specified normatively in ARCHITECTURE.md; the section is cited
beside each constant. All integers are little-endian.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
from crc32c import crc32c

from .errors import ChecksumMismatchError, CorruptionError, VersionError


def checksum(data: bytes | memoryview, start: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``start``. (ARCHITECTURE.md §3)"""
    return crc32c(data, start)


# -- §4.1 WAL file header ------------------------------------------------------------
WAL_MAGIC = b"QWAL"
WAL_VERSION = 1
# magic, version u16, header_size u16, first_record_seq u64, created_ns i64, reserved u32
WAL_HEADER = struct.Struct("<4sHHQqI")
WAL_HEADER_SIZE = WAL_HEADER.size + 4  # + crc32c of the preceding 28 bytes = 32

# -- §4.2 WAL record frame -----------------------------------------------------------
# crc u32 | payload_len u32 | type u8 | flags u8 | reserved u16 | record_seq u64 |
# ingestion_ns i64 | txn_id u64  -> 36 bytes, then payload
WAL_RECORD = struct.Struct("<IIBBHQqQ")
WAL_RECORD_SIZE = WAL_RECORD.size
WAL_MAX_PAYLOAD = 1 << 31

REC_SCHEMA = 1  # payload: Arrow IPC schema message (pa.Schema.serialize())
REC_BATCH = 2  # payload: Arrow IPC record batch message, decoded with the file's schema
REC_STREAM = 3  # payload: a complete Arrow IPC stream (schema + dictionaries + one batch)
REC_TXN = 4  # payload: msgpack map {"app": str, "version": int, "tag": str}
RECORD_TYPES = {REC_SCHEMA, REC_BATCH, REC_STREAM, REC_TXN}


def encode_wal_header(first_record_seq: int, created_ns: int) -> bytes:
    head = WAL_HEADER.pack(WAL_MAGIC, WAL_VERSION, WAL_HEADER_SIZE, first_record_seq, created_ns, 0)
    return head + struct.pack("<I", checksum(head))


def decode_wal_header(path: str, raw: bytes) -> tuple[int, int, int]:
    """Return ``(header_size, first_record_seq, created_ns)`` or raise CorruptionError."""
    if len(raw) < WAL_HEADER_SIZE:
        raise CorruptionError(path, 0, f"wal header truncated ({len(raw)} bytes)")
    magic, version, hsize, first, created, _ = WAL_HEADER.unpack_from(raw)
    if magic != WAL_MAGIC:
        raise VersionError(path, 0, f"not a quiver wal file (magic {magic!r})")
    (stored,) = struct.unpack_from("<I", raw, WAL_HEADER.size)
    computed = checksum(raw[: WAL_HEADER.size])
    if stored != computed:
        raise ChecksumMismatchError(path, 0, "wal header", stored, computed)
    if version != WAL_VERSION:
        raise VersionError(path, 0, f"wal format version {version} not supported (reads 1)")
    return hsize, first, created


def encode_record_header(
    rtype: int, seq: int, ingestion_ns: int, txn_id: int, payload: bytes | memoryview
) -> bytes:
    rest = WAL_RECORD.pack(0, len(payload), rtype, 0, 0, seq, ingestion_ns, txn_id)[4:]
    crc = checksum(payload, checksum(rest))
    return struct.pack("<I", crc) + rest


# -- §6 framed metadata files (STORE, STATE, segment .meta, checkpoints, commits) -----
# magic 4s | version u16 | header_size u16 | body_len u32 | crc32c u32 over bytes 0..12 + body
FRAME = struct.Struct("<4sHHII")
FRAME_SIZE = FRAME.size  # 16

MAGIC_STORE = b"QSTO"
MAGIC_STATE = b"QPST"
MAGIC_SEGMENT_META = b"QSMT"
MAGIC_CHECKPOINT = b"QCKP"
MAGIC_COMMIT = b"QTXN"
MAGIC_HEARTBEAT = b"QHBT"
MAGIC_POLICY = b"QPOL"
MAGIC_MANIFEST = b"QMAN"  # §11.1
MAGIC_GONE = b"QGON"  # §11.3
MAGIC_LEASE = b"QLSE"  # §8.2
MAGIC_STAGED = b"QSTG"  # §10.2
MAGIC_SUBSCRIPTION = b"QSUB"  # §13.8
MAGIC_ACK = b"QACK"  # §13.2
MAGIC_QUARANTINE_MARK = b"QQMK"
FRAME_VERSION = 1


def encode_frame(magic: bytes, body: dict[str, Any]) -> bytes:
    payload = msgpack.packb(body, use_bin_type=True)
    head = FRAME.pack(magic, FRAME_VERSION, FRAME_SIZE, len(payload), 0)[:12]
    crc = checksum(payload, checksum(head))
    return head + struct.pack("<I", crc) + payload


def decode_frame(path: str, magic: bytes, raw: bytes) -> dict[str, Any]:
    """Verify and decode a framed file; raise CorruptionError naming ``path``."""
    if len(raw) < FRAME_SIZE:
        raise CorruptionError(path, 0, f"file truncated ({len(raw)} bytes, header is 16)")
    got, version, hsize, blen, stored = FRAME.unpack_from(raw)
    if got != magic:
        raise VersionError(path, 0, f"wrong magic {got!r}, expected {magic!r}")
    if version != FRAME_VERSION:
        raise VersionError(path, 4, f"format version {version} not supported (reads 1)")
    if len(raw) < hsize + blen:
        raise CorruptionError(path, len(raw), f"body truncated: need {hsize + blen} bytes")
    body = raw[hsize : hsize + blen]
    computed = checksum(body, checksum(raw[:12]))
    if stored != computed:
        raise ChecksumMismatchError(path, 0, "frame", stored, computed)
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as e:  # pragma: no cover - crc caught it
        raise CorruptionError(path, hsize, f"undecodable body: {e}") from e
    if not isinstance(obj, dict):
        raise CorruptionError(path, hsize, "body is not a map")
    return obj


# -- §5 segments -------------------------------------------------------------------
# The names of segment files and WAL files are built in layout.py (§1, §5.1).
SEGMENT_FILE_MODE = 0o444
"""Every file of a segments location is created read-only (§5.1)."""


# -- §5.4 quarantine ---------------------------------------------------------------
def encode_reason(partition: str, seq: int, at_ns: int, reason: str) -> bytes:
    """A ``.reason`` file: ``partition=<pid> seq=<seq> at_ns=<ns>``, then the reason."""
    return f"partition={partition} seq={seq} at_ns={at_ns}\n{reason}\n".encode()


def decode_reason(raw: bytes) -> str:
    """The reason in a ``.reason`` file, its lines joined by spaces, at most 300 chars."""
    text = raw.decode("utf-8", "replace")
    return " ".join(line.strip() for line in text.splitlines()[1:] if line.strip())[:300]


# -- §1 store layout names ---------------------------------------------------------
# Every file and object name of the store is built in layout.py.
