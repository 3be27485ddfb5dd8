"""The per-partition MANIFEST: what a partition has published and what is gone, in one
object a new process reads instead of every ``.meta`` (ARCHITECTURE.md §11.1).

``partitions/<pid>/MANIFEST`` in the store's root, a §6 frame (magic ``QMAN``) whose
body holds the writer's epoch, ``high`` (the highest seq ever published), the seqs
that are gone (``deleted_floor`` and ``deleted_above``) and one entry per live segment
in columns (what retention, status and planning read of a ``.meta``).

A :class:`Manifest` is a value: every change is a pure function returning a new one,
so a write that lost a race applies it again to what won
(:class:`~.manifest_store.ManifestStore` reads and writes them). The transactions its
writer retires are a :class:`~.txn_retirement.TxnRetirement`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import repeat
from typing import Any, NamedTuple, Protocol

from ..errors import CorruptionError
from ..format import (
    FRAME_SIZE,
    MAGIC_MANIFEST,
    decode_frame,
    encode_frame,
)
from ..seams import SegmentInfo
from .txn_retirement import TxnRetirement

COLUMNS = (
    "seq",
    "size_bytes",
    "meta_bytes",
    "rows",
    "batches",
    "min_ingestion_ns",
    "max_ingestion_ns",
    "min_event_time",
    "max_event_time",
)
"""The entry columns of the body's ``segments`` map, in this order (§11.1)."""
_OPTIONAL = {"min_event_time", "max_event_time"}
TXN_COLUMNS = ("txns", "sealed_by")
"""Optional entry columns of an object root (§11.1, §10.2): the ids of the transactions
whose rows the segment holds (a list of int per entry) and, for a segment published
from a staged transaction, the lease epoch of its sealer (int or nil). Written only
when some entry has a value: a manifest without them reads as "no transactions"."""
TXNS_GONE_KEEP = 4096
"""Transaction ids of entries retention removed that the manifest keeps (newest)."""
RECLAIMED = "reclaimed"
"""The optional body key of :class:`ReclaimedTotals` (§11.1): absent while zero."""


class ReclaimedTotals(NamedTuple):
    """What retention's deletions took out of a manifest since it began counting
    (§11.1, body key ``reclaimed``): the segments whose entry it dropped, their rows and
    the range of their ingestion times. Counting begins with the manifest (one written
    before the key existed, or rebuilt from a listing, begins at zero), so ``segments``
    never exceeds the seqs the ack log records deleted (retention records them there
    before their entries go, §15.1); where the two counts are equal, the rows and times
    are those of every segment reclaimed."""

    segments: int = 0
    rows: int = 0
    min_ingestion_ns: int | None = None
    max_ingestion_ns: int | None = None

    def plus(self, entries: Iterable[ManifestEntry]) -> ReclaimedTotals:
        out = self
        for e in entries:
            lo, hi = out.min_ingestion_ns, out.max_ingestion_ns
            out = ReclaimedTotals(
                out.segments + 1,
                out.rows + e.rows,
                e.min_ingestion_ns if lo is None else min(lo, e.min_ingestion_ns),
                e.max_ingestion_ns if hi is None else max(hi, e.max_ingestion_ns),
            )
        return out

    def as_body(self) -> dict[str, int | None]:
        return dict(self._asdict())

    @classmethod
    def from_body(cls, raw: object) -> ReclaimedTotals:
        """The body's value; ValueError when it is not a map of the four integers
        (the times nil only while no segment is counted)."""
        if not isinstance(raw, dict) or set(raw) != set(cls._fields):
            raise ValueError(f"{RECLAIMED} is not a map of {list(cls._fields)}")
        out = cls(**raw)
        times = (out.min_ingestion_ns, out.max_ingestion_ns)
        if not all(type(v) is int and v >= 0 for v in (out.segments, out.rows)) or not all(
            type(t) is int if out.segments else t is None for t in times
        ):
            raise ValueError(f"{RECLAIMED} holds a value of the wrong type")
        return out


NOTHING_RECLAIMED = ReclaimedTotals()
"""The totals of a manifest that counted no deletion (the body key is then absent)."""


class _MetaLike(SegmentInfo, Protocol):
    """What a manifest entry takes of a segment's metadata: what retention reads of it
    (:class:`~quiver_spark.seams.SegmentInfo`) and what planning and status read."""

    @property
    def rows(self) -> int: ...
    @property
    def batches(self) -> int: ...
    @property
    def min_event_time(self) -> int | None: ...
    @property
    def max_event_time(self) -> int | None: ...

    def encode(self) -> bytes: ...


class ManifestEntry(NamedTuple):
    """One live segment as the manifest records it (a ``SegmentInfo``; a tuple, so
    that a manifest of many thousand entries decodes fast)."""

    partition: str
    seq: int
    size_bytes: int
    """Length of the ``.arrow``."""
    meta_bytes: int
    """Length of the ``.meta`` (status counts both files)."""
    rows: int
    batches: int
    min_ingestion_ns: int
    max_ingestion_ns: int
    min_event_time: int | None = None
    max_event_time: int | None = None
    txns: tuple[int, ...] = ()
    """Object root: the transactions whose rows this segment holds (§10.2)."""
    sealed_by: int | None = None
    """Object root: the lease epoch that published it from a staged transaction."""

    @classmethod
    def from_meta(
        cls, meta: _MetaLike, txns: Iterable[int] = (), sealed_by: int | None = None
    ) -> ManifestEntry:
        return cls(
            meta.partition,
            meta.seq,
            meta.size_bytes,
            len(meta.encode()),
            meta.rows,
            meta.batches,
            meta.min_ingestion_ns,
            meta.max_ingestion_ns,
            meta.min_event_time,
            meta.max_event_time,
            tuple(sorted(int(t) for t in txns)),
            sealed_by,
        )

    @property
    def disk_bytes(self) -> int:
        """Bytes of its two files on disk."""
        return self.size_bytes + self.meta_bytes


@dataclass(frozen=True)
class Manifest:
    """One partition's manifest (see the module docstring). ``version`` is the object
    version it was read or written at (None: not stored yet); never encoded."""

    partition: str
    epoch: int = 0
    high: int = 0
    deleted_floor: int = 0
    deleted_above: frozenset[int] = frozenset()
    entries: tuple[ManifestEntry, ...] = ()
    damaged: tuple[tuple[int, str], ...] = ()
    """Entries whose ``.meta`` was found failing verification: ``(seq, error)``. They
    stay entries (their bytes count) and are never chosen by retention."""
    txns_gone: tuple[int, ...] = ()
    """Object root: transaction ids of entries retention removed (the newest
    ``TXNS_GONE_KEEP``), so a staged object left behind is never sealed again."""
    txn_floor: int = 0
    """Object root: every transaction id <= it is sealed or decided against (the
    partition's writer records it at each publication, §10.2): a staged object of such
    an id is garbage. 0 in a manifest written without it."""
    txn_high: int = 0
    """Object root: every transaction id <= it not in ``txns_open`` is sealed or decided
    against (§10.2); the writer records it with ``txn_floor``, which a transaction
    still open holds down. 0 (absent) while it is not above ``txn_floor``."""
    txns_open: tuple[int, ...] = ()
    """Object root: the ids above ``txn_floor``, at or below ``txn_high``, not sealed
    yet when it was recorded (ascending; absent while empty)."""
    reclaimed: ReclaimedTotals = NOTHING_RECLAIMED
    """What retention's deletions took out of this manifest since it began counting
    (:class:`ReclaimedTotals`); zero in a manifest written without it."""
    version: str | None = field(default=None, compare=False)

    # -- questions --------------------------------------------------------------------
    def deleted(self, seq: int) -> bool:
        """Whether ``seq`` was published here once and is gone (deleted, moved aside)."""
        return seq <= self.deleted_floor or seq in self.deleted_above

    def seqs(self) -> list[int]:
        return [e.seq for e in self.entries]

    def damaged_errors(self) -> dict[int, str]:
        return dict(self.damaged)

    def sealed_txns(self) -> set[int]:
        """Transaction ids whose rows a segment published here holds or held (§10.2)."""
        out = set(self.txns_gone)
        for e in self.entries:
            out.update(e.txns)
        return out

    def seals(self, txn_id: int) -> bool:
        """Whether staged transaction ``txn_id`` needs no seal: a segment published
        here holds or held it, or it is retired (:meth:`retired`, §10.2)."""
        return self.retired(txn_id) or txn_id in self.sealed_txns()

    @cached_property
    def retirement(self) -> TxnRetirement:
        """The transactions the writer recorded retired (§10.2): ``txn_floor``,
        ``txn_high`` and ``txns_open``."""
        return TxnRetirement(self.txn_floor, self.txn_high, frozenset(self.txns_open))

    def retired(self, txn_id: int) -> bool:
        """Whether transaction ``txn_id`` is sealed or decided against by what the
        writer recorded (:meth:`TxnRetirement.retired`, §10.2)."""
        return self.retirement.retired(txn_id)

    # -- changes (pure: each returns a new manifest) ------------------------------------
    def with_retirement(self, retirement: TxnRetirement) -> Manifest:
        """The transactions ``retirement`` retires joined with those this manifest
        retires (:meth:`TxnRetirement.joined`): ``txn_floor`` and ``txn_high`` never
        decrease and ``txns_open`` only loses ids. ``txn_high`` is recorded 0 while it
        is not above ``txn_floor``."""
        r = self.retirement.joined(retirement)
        out = (r.floor, r.high if r.high > r.floor else 0, tuple(sorted(r.open)))
        if out == (self.txn_floor, self.txn_high, self.txns_open):
            return self
        return replace(self, txn_floor=out[0], txn_high=out[1], txns_open=out[2])

    def facts(self) -> Manifest:
        """What only this manifest knows of its partition, no listing can tell: its
        high, the seqs gone, the transactions sealed (no entry, no damage, no epoch)."""
        return replace(
            self, epoch=0, entries=(), damaged=(), reclaimed=NOTHING_RECLAIMED, version=None
        )

    def with_facts(self, kept: Manifest) -> Manifest:
        """These facts joined with ``kept``'s (a partition's GONE, §15.4): every seq
        either records gone stays gone (an entry of one ``kept`` records gone is
        dropped), the higher high, every transaction either names as sealed or
        retires (:meth:`with_retirement`). All of them only grow, so joining is safe in any
        order and with a copy of any age."""
        floor = max(self.deleted_floor, kept.deleted_floor)
        above = {s for s in (*self.deleted_above, *kept.deleted_above) if s > floor}
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        gone = set(self.txns_gone)
        txns = (*self.txns_gone, *(t for t in kept.txns_gone if t not in gone))
        out = replace(
            self,
            high=max(self.high, kept.high),
            deleted_floor=floor,
            deleted_above=frozenset(above),
            txns_gone=txns[-TXNS_GONE_KEEP:],
        ).with_retirement(kept.retirement)
        if any(out.deleted(e.seq) for e in out.entries):
            out = replace(
                out,
                entries=tuple(e for e in out.entries if not out.deleted(e.seq)),
                damaged=tuple((q, err) for q, err in out.damaged if not out.deleted(q)),
            )
        return out

    def lists(self, seq: int) -> bool:
        """Whether ``seq`` is a live entry (on an object root: published)."""
        i = bisect.bisect_left(self.entries, seq, key=lambda e: e.seq)
        return i < len(self.entries) and self.entries[i].seq == seq

    def published(self, entries: Iterable[ManifestEntry], *, void_gaps: bool = False) -> Manifest:
        """These entries added (an entry already there, or a seq that is gone, is
        passed over: a deleted seq never comes back). ``void_gaps`` (the writer of an
        object root): the seqs between ``high`` and the lowest new entry, which the
        writer passed over because another holder's objects were there, are recorded
        void (gone, in ``deleted_above``: never published, never a loss)."""
        have = {e.seq for e in self.entries}
        new = [e for e in entries if e.seq not in have and not self.deleted(e.seq)]
        if not new:
            return self
        low = min(e.seq for e in new)
        if void_gaps and low > self.high + 1:
            return self.removed(range(self.high + 1, low)).published(new)
        merged = tuple(sorted([*self.entries, *new], key=lambda e: e.seq))
        return replace(self, entries=merged, high=max(self.high, merged[-1].seq))

    def removed(self, seqs: Iterable[int], *, reclaimed: bool = False) -> Manifest:
        """These seqs gone for good: their entries dropped, recorded deleted.
        ``reclaimed`` (retention's deletion, §15.1): the entries dropped are counted in
        :attr:`reclaimed`; a seq without an entry, or with a damaged one, is not (its
        rows are unknown here)."""
        gone = {s for s in seqs if not self.deleted(s)}
        if not gone:
            return self
        high = max(self.high, max(gone))
        floor, above = self.deleted_floor, set(self.deleted_above) | gone
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        txns = [t for e in self.entries if e.seq in gone for t in e.txns]
        bad = {s for s, _ in self.damaged}
        return replace(
            self,
            high=high,
            deleted_floor=floor,
            deleted_above=frozenset(above),
            entries=tuple(e for e in self.entries if e.seq not in gone),
            damaged=tuple((s, err) for s, err in self.damaged if s not in gone),
            txns_gone=(*self.txns_gone, *txns)[-TXNS_GONE_KEEP:] if txns else self.txns_gone,
            reclaimed=self.reclaimed.plus(
                e for e in self.entries if e.seq in gone and e.seq not in bad
            )
            if reclaimed
            else self.reclaimed,
        )

    def marked_damaged(self, found: Iterable[tuple[int, str]]) -> Manifest:
        """These live seqs recorded as having a ``.meta`` that fails verification."""
        live = {e.seq for e in self.entries}
        known = dict(self.damaged)
        for seq, error in found:
            if seq in live:
                known[seq] = error
        if known == dict(self.damaged):
            return self
        return replace(self, damaged=tuple(sorted(known.items())))

    def at_epoch(self, epoch: int) -> Manifest:
        return self if epoch <= self.epoch else replace(self, epoch=epoch)

    # -- bytes ------------------------------------------------------------------------
    def encode(self, magic: bytes = MAGIC_MANIFEST) -> bytes:
        cols: dict[str, list[Any]] = {c: [getattr(e, c) for e in self.entries] for c in COLUMNS}
        body = {
            "partition": self.partition,
            "epoch": self.epoch,
            "high": self.high,
            "deleted_floor": self.deleted_floor,
            "deleted_above": sorted(self.deleted_above),
            "segments": cols,
            "damaged": [[s, err] for s, err in self.damaged],
        }
        # object roots only (§10.2): absent while empty, so other manifests keep their bytes
        if any(e.txns for e in self.entries):
            cols["txns"] = [list(e.txns) for e in self.entries]
        if any(e.sealed_by is not None for e in self.entries):
            cols["sealed_by"] = [e.sealed_by for e in self.entries]
        if self.txns_gone:
            body["txns_gone"] = list(self.txns_gone)
        if self.txn_floor:
            body["txn_floor"] = self.txn_floor
        if self.txn_high:
            body["txn_high"] = self.txn_high
        if self.txns_open:
            body["txns_open"] = list(self.txns_open)
        if self.reclaimed.segments:  # absent while zero, so other manifests keep their bytes
            body[RECLAIMED] = self.reclaimed.as_body()
        return encode_frame(magic, body)

    @classmethod
    def decode(
        cls, path: str, raw: bytes, version: str | None = None, magic: bytes = MAGIC_MANIFEST
    ) -> Manifest:
        """Verify and decode; CorruptionError (naming ``path``) on any damage."""
        body = decode_frame(path, magic, raw)

        def bad(what: str) -> CorruptionError:
            return CorruptionError(path, FRAME_SIZE, f"manifest {what}")

        try:
            partition = body["partition"]
            epoch, high = int(body["epoch"]), int(body["high"])
            floor = int(body["deleted_floor"])
            above = frozenset(int(s) for s in body["deleted_above"])
            cols = body["segments"]
            damaged = tuple((int(s), str(err)) for s, err in body.get("damaged", []))
            txns_gone = tuple(int(t) for t in body.get("txns_gone", []))
            txn_floor = int(body.get("txn_floor", 0))
            txn_high = int(body.get("txn_high", 0))
            txns_open = tuple(int(t) for t in body.get("txns_open", []))
            reclaimed = ReclaimedTotals.from_body(body.get(RECLAIMED, NOTHING_RECLAIMED.as_body()))
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"lacks or mistypes a required key ({e})") from e
        if not isinstance(partition, str) or not isinstance(cols, dict):
            raise bad("partition or segments mistyped")
        missing = [c for c in COLUMNS if c not in cols and c not in _OPTIONAL]
        if missing or not isinstance(cols["seq"], list):
            raise bad(f"segments lack column(s) {missing or ['seq']}")
        n = len(cols["seq"])
        columns: list[Any] = [cols.get(c, [None] * n) for c in COLUMNS]
        if any(not isinstance(c, list) or len(c) != n for c in columns):
            raise bad("segments columns differ in length")
        for c, col in zip(COLUMNS, columns, strict=True):
            kinds = set(map(type, col))
            if not kinds <= ({int, type(None)} if c in _OPTIONAL else {int}):
                raise bad(f"segments column {c} holds a value that is not an integer")
        txns = cols.get("txns", [[]] * n)
        sealed_by = cols.get("sealed_by", [None] * n)
        if not isinstance(txns, list) or not isinstance(sealed_by, list):
            raise bad("segments txns or sealed_by column mistyped")
        if len(txns) != n or len(sealed_by) != n:
            raise bad("segments columns differ in length")
        if any(not isinstance(t, list) or not all(isinstance(i, int) for i in t) for t in txns):
            raise bad("segments column txns holds a value that is not a list of integers")
        if not set(map(type, sealed_by)) <= {int, type(None)}:
            raise bad("segments column sealed_by holds a value that is not an integer")
        columns += [[tuple(t) for t in txns], sealed_by]
        entries = tuple(map(ManifestEntry._make, zip(repeat(partition), *columns)))
        seqs = [e.seq for e in entries]
        if any(not isinstance(s, int) or s < 1 for s in seqs) or seqs != sorted(set(seqs)):
            raise bad("segment seqs are not increasing positive integers")
        if seqs and seqs[-1] > high:
            raise bad(f"segment {seqs[-1]} is above high {high}")
        return cls(
            partition, epoch, high, floor, above, entries, damaged, txns_gone, txn_floor,
            txn_high, txns_open, reclaimed=reclaimed, version=version,
        )  # fmt: skip
