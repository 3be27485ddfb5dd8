"""Segment metadata: the ``.meta`` body of a finalized segment (ARCHITECTURE.md §5.3).

A segment is published iff its ``.meta`` exists. The ``.meta`` is a §6 frame
(magic ``QSMT``) whose msgpack body is :meth:`SegmentMeta.to_body`. Decoding is strict:
a missing or ill-typed required key is a :class:`~quiver_spark.errors.CorruptionError`
naming the file; unknown keys are ignored (forward compatible additions).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import CorruptionError
from ..format import FRAME_SIZE, MAGIC_SEGMENT_META, decode_frame, encode_frame

_INT = "int"
_OPT_INT = "int|None"
_OPT_STR = "str|None"

# key -> expected type, in body order (ARCHITECTURE.md §5.3)
_REQUIRED: dict[str, str] = {
    "partition": "str",
    "seq": _INT,
    "rows": _INT,
    "size_bytes": _INT,
    "batches": _INT,
    "min_ingestion_ns": _INT,
    "max_ingestion_ns": _INT,
    "event_time_column": _OPT_STR,
    "min_event_time": _OPT_INT,
    "max_event_time": _OPT_INT,
    "schema_fingerprint": "str",
    "checksum": _INT,
    "wal_ranges": "ranges",
    "created_ns": _INT,
}


def schema_fingerprint(schema: pa.Schema) -> str:
    """Hex SHA-256 of ``schema``'s Arrow IPC serialization without schema-level metadata.

    Schema-level key/value metadata (pandas or Spark annotations) varies between
    producers of identical data and is dropped; field-level metadata is kept because
    it carries meaning (extension types). Two fingerprints are compared for equality
    only; they are stable for a given pyarrow major version.
    """
    return hashlib.sha256(schema.remove_metadata().serialize().to_pybytes()).hexdigest()


@dataclass(frozen=True)
class SegmentMeta:
    """Everything known about one finalized segment without opening its ``.arrow``.

    Attributes
    ----------
    partition, seq
        Store partition id and segment sequence number (>= 1, never reused).
    rows, size_bytes, batches
        Row count, ``.arrow`` file size in bytes, and record batches in the file.
    min_ingestion_ns, max_ingestion_ns
        Ingestion time range (ns since the epoch) of the WAL records it holds.
    event_time_column, min_event_time, max_event_time
        Optional event-time column and its min/max *physical* value: a timestamp in
        its own unit (UTC-based for zoned timestamps), a date in days (date32) or
        milliseconds (date64), or the integer itself. ``None`` when no column was
        configured or every value was null.
    schema_fingerprint
        See :func:`schema_fingerprint`.
    checksum
        CRC-32C of the whole ``.arrow`` file.
    wal_ranges
        Inclusive WAL record-seq ranges this segment covers, as given by the store.
    created_ns
        Wall-clock time of finalization (informational; never used for ordering).
    txns, epoch
        Object roots only (optional keys, absent elsewhere): the transactions whose
        rows the segment holds and the lease epoch of the holder that published it,
        as its MANIFEST entry says; what tells a fenced holder's orphan from a
        published segment when the MANIFEST cannot be read (§5.3, §11.3).
    """

    partition: str
    seq: int
    rows: int
    size_bytes: int
    batches: int
    min_ingestion_ns: int
    max_ingestion_ns: int
    event_time_column: str | None
    min_event_time: int | None
    max_event_time: int | None
    schema_fingerprint: str
    checksum: int
    wal_ranges: tuple[tuple[int, int], ...]
    created_ns: int
    txns: tuple[int, ...] = ()
    epoch: int = 0

    def to_body(self) -> dict[str, Any]:
        """The msgpack body of the ``.meta`` frame (ARCHITECTURE.md §5.3)."""
        body = {k: getattr(self, k) for k in _REQUIRED}
        body["wal_ranges"] = [[lo, hi] for lo, hi in self.wal_ranges]
        if self.txns:
            body["txns"] = list(self.txns)
        if self.epoch:
            body["epoch"] = self.epoch
        return body

    @classmethod
    def from_body(cls, path: str, body: dict[str, Any]) -> SegmentMeta:
        """Validate and convert a decoded body; raise CorruptionError naming ``path``."""
        values: dict[str, Any] = {}
        for key, kind in _REQUIRED.items():
            if key not in body:
                raise CorruptionError(path, FRAME_SIZE, f"segment meta lacks key {key!r}")
            values[key] = _check(path, key, kind, body[key])
        for key in ("rows", "size_bytes", "batches"):
            if values[key] < 0:
                raise CorruptionError(path, FRAME_SIZE, f"segment meta {key} is negative")
        if values["seq"] < 1 or not 0 <= values["checksum"] < 1 << 32:
            raise CorruptionError(path, FRAME_SIZE, "segment meta seq or checksum out of range")
        txns = body.get("txns", [])
        epoch = body.get("epoch", 0)
        if not (isinstance(txns, (list, tuple)) and all(_is_int(t) for t in txns)):
            raise CorruptionError(
                path, FRAME_SIZE, f"segment meta key 'txns' is not ints: {txns!r}"
            )
        if not _is_int(epoch) or epoch < 0:
            raise CorruptionError(path, FRAME_SIZE, f"segment meta key 'epoch' is bad: {epoch!r}")
        return cls(**values, txns=tuple(int(t) for t in txns), epoch=int(epoch))

    def encode(self) -> bytes:
        """The whole ``.meta`` file: a §6 frame with magic ``QSMT``."""
        return encode_frame(MAGIC_SEGMENT_META, self.to_body())

    @classmethod
    def decode(cls, path: str, raw: bytes) -> SegmentMeta:
        """Verify the frame and decode the body of a ``.meta`` file read from ``path``."""
        return cls.from_body(path, decode_frame(path, MAGIC_SEGMENT_META, raw))


def _check(path: str, key: str, kind: str, value: Any) -> Any:
    ok: bool
    if kind == "ranges":
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(r, (list, tuple))
            and len(r) == 2
            and all(_is_int(x) for x in r)
            and r[0] <= r[1]
            for r in value
        )
        if ok:
            return tuple((int(r[0]), int(r[1])) for r in value)
    elif kind == _INT:
        ok = _is_int(value)
    elif kind == _OPT_INT:
        ok = value is None or _is_int(value)
    elif kind == _OPT_STR:
        ok = value is None or isinstance(value, str)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise CorruptionError(
            path, FRAME_SIZE, f"segment meta key {key!r} is not {kind}: {value!r}"
        )
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
