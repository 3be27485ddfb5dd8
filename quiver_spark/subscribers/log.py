"""The shared ack log: fixed 32-byte records chained by a running CRC-32C.

Layout (ARCHITECTURE.md §13.2): a 32-byte file header, then records of exactly 32
bytes. The last four bytes of every record hold ``crc32c(file[0 : end - 4])``, the CRC
of the whole file up to that point, so one CRC call over a file verifies every record
in it and a mismatch is located by a second, record-by-record pass. Fixed-size records
let a replay decode a million records with a handful of vectorised Arrow kernels.

Only this module knows the byte layout; :mod:`.state` sees decoded :class:`Facts`.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from .. import format as fmt
from .. import layout
from ..errors import ChecksumMismatchError, CorruptionError, VersionError
from ..format import checksum
from ..fs import FileIO

log = logging.getLogger(__name__)

# -- §13.2 file header --------------------------------------------------------------
ACK_MAGIC = fmt.MAGIC_ACK
ACK_VERSION = 1
# magic 4s | version u16 | header_size u16 | generation u64 | reserved u64 | reserved u32
ACK_HEADER = struct.Struct("<4sHHQQI")
ACK_HEADER_SIZE = ACK_HEADER.size + 4  # + crc32c of the preceding 28 bytes = 32

# -- §13.3 records ------------------------------------------------------------------
# kind u8 | flag u8 | aux u16 | b u32 | sub_id u32 | part_id u32 | a u64 | c u32 | crc u32
RECORD = struct.Struct("<BBHIIIQI")
RECORD_SIZE = RECORD.size + 4  # 32
RECORD_WITH_CRC = struct.Struct("<BBHIIIQII")

K_NAME = 1  # flag: namespace; aux: chunk index | count << 8; b: id; bytes 8..28: name chunk
K_START = 2  # sub_id, part_id, a = start high-water mark
K_DEREG = 3  # sub_id
K_OUTCOME = 4  # flag: outcome; sub_id, part_id, a = first seq, b = count
K_DELETED = 5  # part_id, a = first seq, b = count
K_CLAIM = 6  # sub_id, a = the live consumer's token, b = its lease epoch (object roots, §13.7)
KINDS = {K_NAME, K_START, K_DEREG, K_OUTCOME, K_DELETED, K_CLAIM}

NS_SUBSCRIBER = 1
NS_PARTITION = 2
NAME_CHUNK = 20

OUT_ACK = 1
OUT_NACK = 2
OUT_DROPPED = 3

VECTOR_MIN_RECORDS = 2048
"""Below this many records a tail is decoded with ``struct``; above, with Arrow kernels."""


def log_file_name(gen: int) -> str:
    return layout.ack_log_file(gen)


def parse_log_gen(name: str) -> int | None:
    return layout.parse_ack_log_file(name)


def encode_header(gen: int, token: int = 0) -> bytes:
    """A §13.2 header; ``token`` (bytes 16..24) is zero in a POSIX log file and the
    appender's random nonzero token in an object delta (§13.7)."""
    head = ACK_HEADER.pack(ACK_MAGIC, ACK_VERSION, ACK_HEADER_SIZE, gen, token, 0)
    return head + struct.pack("<I", checksum(head))


def header_token(raw: bytes) -> int:
    """The token in a verified header's bytes 16..24 (0 when none)."""
    return int(ACK_HEADER.unpack_from(raw)[4])


def decode_header(path: str, raw: bytes) -> int:
    """Return the generation in a log file header or raise CorruptionError."""
    if len(raw) < ACK_HEADER_SIZE:
        raise CorruptionError(path, 0, f"ack log header truncated ({len(raw)} bytes)")
    magic, version, _hsize, gen, _, _ = ACK_HEADER.unpack_from(raw)
    if magic != ACK_MAGIC:
        raise VersionError(path, 0, f"not a quiver ack log (magic {magic!r})")
    (stored,) = struct.unpack_from("<I", raw, ACK_HEADER.size)
    computed = checksum(raw[: ACK_HEADER.size])
    if stored != computed:
        raise ChecksumMismatchError(path, 0, "ack log header", stored, computed)
    if version != ACK_VERSION:
        raise VersionError(path, 4, f"ack log version {version} not supported (reads 1)")
    return int(gen)


class RecordEncoder:
    """Builds a run of records that continue the CRC chain from ``running``."""

    def __init__(self, running: int) -> None:
        self.running = running
        self.parts: list[bytes] = []

    def add(
        self,
        kind: int,
        flag: int = 0,
        aux: int = 0,
        sub: int = 0,
        a: int = 0,
        part: int = 0,
        b: int = 0,
        c: int = 0,
    ) -> None:
        body = RECORD.pack(kind, flag, aux, b, sub, part, a, c)
        crc = checksum(body, self.running)
        tail = struct.pack("<I", crc)
        self.running = checksum(tail, crc)
        self.parts.append(body + tail)

    def add_name(self, ns: int, ident: int, name: str) -> None:
        raw = name.encode("ascii")
        chunks = [raw[i : i + NAME_CHUNK] for i in range(0, len(raw), NAME_CHUNK)]
        for i, chunk in enumerate(chunks):
            sub, part, a, c = struct.unpack("<IIQI", chunk.ljust(NAME_CHUNK, b"\0"))
            self.add(K_NAME, ns, i | (len(chunks) << 8), sub, a, part, ident, c)

    def data(self) -> bytes:
        return b"".join(self.parts)


@dataclass
class DoneGroup:
    """Ack/dropped records of one (subscriber, partition).

    ``counts`` is None when every record covers exactly one segment (``firsts`` then
    in any order); otherwise ``firsts`` is ascending and ``counts`` parallel to it.
    """

    sub: int
    part: int
    firsts: list[int]
    counts: list[int] | None


@dataclass
class Facts:
    """Decoded records of one read. Outcome columns are parallel lists."""

    names: list[tuple[int, int, int, int, bytes]] = field(default_factory=list)
    starts: list[tuple[int, int, int]] = field(default_factory=list)  # sub, part, hwm
    deregs: list[int] = field(default_factory=list)
    deleted: list[tuple[int, int, int]] = field(default_factory=list)  # part, first, count
    nacks: list[tuple[int, int, int, int]] = field(default_factory=list)
    done: list[DoneGroup] = field(default_factory=list)  # ack/dropped, by (sub, part)
    claims: list[tuple[int, int, int]] = field(default_factory=list)  # sub, token, epoch
    position: int = 0
    """Where these records stand in the log (an object root's delta number): a claim
    made later in the log wins (§13.7)."""
    records: int = 0

    def empty(self) -> bool:
        return self.records == 0


def _other(facts: Facts, rec: tuple[int, ...], raw: bytes, off: int) -> None:
    kind, flag, aux, b, sub, part, a = rec[:7]
    if kind == K_NAME:
        facts.names.append((flag, b, aux & 0xFF, aux >> 8, raw[off + 8 : off + 28]))
    elif kind == K_START:
        facts.starts.append((sub, part, a))
    elif kind == K_DEREG:
        facts.deregs.append(sub)
    elif kind == K_DELETED:
        facts.deleted.append((part, a, b))
    elif kind == K_OUTCOME and flag == OUT_NACK:
        facts.nacks.append((sub, part, a, b))
    elif kind == K_CLAIM:
        facts.claims.append((sub, a, b))


def decode_records(raw: bytes) -> Facts:
    """Decode verified, whole records (``len(raw) % 32 == 0``) into :class:`Facts`."""
    n = len(raw) // RECORD_SIZE
    facts = Facts(records=n)
    if n < VECTOR_MIN_RECORDS:
        done: list[tuple[int, int, int, int]] = []
        for i, rec in enumerate(RECORD_WITH_CRC.iter_unpack(raw)):
            if rec[0] == K_OUTCOME and rec[1] != OUT_NACK:
                done.append((rec[4], rec[5], rec[6], rec[3]))
            else:
                _other(facts, rec, raw, i * RECORD_SIZE)
        done.sort()
        for (sub, part), grp in itertools.groupby(done, key=lambda r: (r[0], r[1])):
            rows = list(grp)
            all_counts = [r[3] for r in rows]
            multi = any(c != 1 for c in all_counts)
            facts.done.append(
                DoneGroup(sub, part, [r[2] for r in rows], all_counts if multi else None)
            )
        return facts
    buf = pa.py_buffer(raw)
    w = pa.FixedSizeListArray.from_arrays(pa.Array.from_buffers(pa.uint32(), n * 8, [None, buf]), 8)
    q = pa.FixedSizeListArray.from_arrays(pa.Array.from_buffers(pa.uint64(), n * 4, [None, buf]), 4)
    kind_flag = pc.bit_wise_and(pc.list_element(w, 0), 0xFFFF)
    is_done = pc.is_in(
        kind_flag, pa.array([K_OUTCOME | OUT_ACK << 8, K_OUTCOME | OUT_DROPPED << 8], pa.uint32())
    )
    table = pa.table(
        {
            "key": pc.list_element(q, 1),  # sub_id | part_id << 32
            "first": pc.list_element(q, 2),
            "count": pc.list_element(w, 1),
        }
    ).filter(is_done)
    if table.num_rows:
        grouped = table.group_by("key", use_threads=False).aggregate(
            [("first", "list"), ("count", "max")]
        )
        firsts_col = grouped.column("first_list").combine_chunks()
        offsets = _ints(firsts_col.offsets, "i")
        values = _ints(firsts_col.values, "Q")
        keys = _ints(grouped.column("key"), "Q")
        maxc = grouped.column("count_max").to_pylist()
        for g, k in enumerate(keys):
            lo, hi = offsets[g], offsets[g + 1]
            firsts = values[lo:hi]
            counts = None
            if maxc[g] != 1:
                rows = table.filter(pc.equal(table.column("key"), pa.scalar(k, pa.uint64())))
                pairs = sorted(
                    zip(
                        _ints(rows.column("first"), "Q"),
                        _ints(rows.column("count"), "I"),
                        strict=True,
                    )
                )
                firsts, counts = [p[0] for p in pairs], [p[1] for p in pairs]
            facts.done.append(DoneGroup(k & 0xFFFF_FFFF, k >> 32, firsts, counts))
    for i in _ints(pc.indices_nonzero(pc.invert(is_done)), "Q"):
        off = i * RECORD_SIZE
        _other(facts, RECORD_WITH_CRC.unpack_from(raw, off), raw, off)
    return facts


def _ints(arr: pa.Array | pa.ChunkedArray, code: str) -> list[int]:
    """A primitive Arrow integer array as a Python list, via its buffer (fast)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = arr.type.bit_width // 8
    data = arr.buffers()[1]
    mv = memoryview(data)[arr.offset * width : (arr.offset + len(arr)) * width]
    return mv.cast(code).tolist()  # type: ignore[call-overload]


@dataclass
class Cursor:
    """How far one log file has been read: offset and the running CRC there."""

    gen: int
    offset: int
    running: int


@dataclass
class TailRead:
    data: bytes
    cursor: Cursor
    torn_bytes: int = 0
    torn_offset: int | None = None
    skipped: list[int] = field(default_factory=list)


def read_from(io: FileIO, path: str, offset: int, size: int = -1) -> bytes:
    """``size`` bytes (default: to the end) of ``path`` from ``offset``, via the I/O hook."""
    io.before("read", path)
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def open_cursor(io: FileIO, path: str) -> Cursor:
    raw = read_from(io, path, 0, ACK_HEADER_SIZE)
    gen = decode_header(path, raw)
    return Cursor(gen, ACK_HEADER_SIZE, checksum(raw))


def read_tail(
    io: FileIO, path: str, cur: Cursor, *, salvage: bool = False, last_file: bool = True
) -> TailRead:
    """Verify and return the whole records after ``cur``.

    A torn tail is left out and reported (the caller cuts it under the exclusive
    lock): a partial record or zero-filled records at the end of a file, or, in the
    last file, a final record whose CRC fails and which no single-bit correction
    repairs (a write cut short). Any other CRC mismatch, including a single flipped
    bit in the final record, raises :class:`ChecksumMismatchError` naming file and
    offset, unless ``salvage``: then the bad record is skipped and its offset listed.
    """
    raw = read_from(io, path, cur.offset)
    whole = len(raw) - len(raw) % RECORD_SIZE
    torn = len(raw) - whole
    # zero-filled whole records at the end are unwritten space after a power loss
    while whole and raw[whole - RECORD_SIZE : whole].count(0) == RECORD_SIZE:
        whole -= RECORD_SIZE
        torn += RECORD_SIZE
    out = TailRead(b"", cur, torn, cur.offset + whole if torn else None)
    if not whole:
        return out
    body = raw[:whole]
    (stored,) = struct.unpack_from("<I", body, whole - 4)
    if checksum(memoryview(body)[: whole - 4], cur.running) == stored:
        out.data = body
        out.cursor = Cursor(cur.gen, cur.offset + whole, checksum(body[whole - 4 :], stored))
        return out
    return _locate(path, body, cur, out, salvage, last_file)


def _one_bit_away(rec: bytes, running: int) -> bool:
    """True if flipping a single bit makes ``rec`` (32 bytes) verify: bit rot, not a tear."""
    buf = bytearray(rec)
    for i in range(RECORD_SIZE * 8):
        buf[i >> 3] ^= 1 << (i & 7)
        ok = checksum(bytes(buf[:28]), running) == struct.unpack_from("<I", buf, 28)[0]
        buf[i >> 3] ^= 1 << (i & 7)
        if ok:
            return True
    return False


def _locate(
    path: str, body: bytes, cur: Cursor, out: TailRead, salvage: bool, last_file: bool
) -> TailRead:
    running = cur.running
    keep: list[bytes] = []
    mv = memoryview(body)
    for off in range(0, len(body), RECORD_SIZE):
        rec = mv[off : off + RECORD_SIZE]
        (stored,) = struct.unpack_from("<I", rec, 28)
        computed = checksum(rec[:28], running)
        final = off + RECORD_SIZE == len(body)
        if computed != stored and final and last_file and not _one_bit_away(bytes(rec), running):
            out.data = b"".join(keep)
            out.cursor = Cursor(cur.gen, cur.offset + off, running)
            out.torn_offset = cur.offset + off
            out.torn_bytes += RECORD_SIZE
            return out
        if computed != stored and not salvage:
            raise ChecksumMismatchError(path, cur.offset + off, "ack record", stored, computed)
        if computed != stored or rec[0] not in KINDS:
            out.skipped.append(cur.offset + off)
            log.warning("quiver.acklog.salvage_skip path=%s offset=%d", path, cur.offset + off)
        else:
            keep.append(bytes(rec))
        running = checksum(rec[28:], stored)
    out.data = b"".join(keep)
    out.cursor = Cursor(cur.gen, cur.offset + len(body), running)
    return out


def read_whole(name: str, raw: bytes, *, salvage: bool = False) -> tuple[int, bytes, list[int]]:
    """Verify a complete ack-log file held in memory (an object delta, §13.7, which is
    whole or absent: nothing in it is a torn write) and return ``(generation, verified
    records, offsets skipped)``. A bad header, a partial record or a CRC mismatch
    raises :class:`CorruptionError` / :class:`ChecksumMismatchError` naming ``name``
    and the offset; with ``salvage`` a bad record is skipped instead (header damage
    always raises: the chain cannot be checked without it)."""
    gen = decode_header(name, raw)
    rest = len(raw) - ACK_HEADER_SIZE
    if rest % RECORD_SIZE:
        raise CorruptionError(
            name, len(raw) - rest % RECORD_SIZE, f"partial ack record ({rest % RECORD_SIZE} bytes)"
        )
    cur = Cursor(gen, ACK_HEADER_SIZE, checksum(raw[:ACK_HEADER_SIZE]))
    out = TailRead(b"", cur)
    if not rest:
        return gen, b"", []
    body = raw[ACK_HEADER_SIZE:]
    (stored,) = struct.unpack_from("<I", body, rest - 4)
    if checksum(memoryview(body)[: rest - 4], cur.running) == stored:
        return gen, body, []
    out = _locate(name, body, cur, out, salvage, last_file=False)
    return gen, out.data, out.skipped


def list_generations(io: FileIO, directory: str) -> list[int]:
    gens = (parse_log_gen(n) for n in io.listdir(directory))
    return sorted(g for g in gens if g is not None)


def create_log(io: FileIO, directory: str, gen: int) -> str:
    """Create ``ack-<gen>.log`` durably (header written, fsynced, directory fsynced)."""
    path = os.path.join(directory, log_file_name(gen))
    io.atomic_write(path, encode_header(gen))
    log.info("quiver.acklog.rotate gen=%d", gen)
    return path
