"""The per-partition MANIFEST: what a partition has published and what is gone, in one
object a new process reads instead of every ``.meta`` (ARCHITECTURE.md §6.7).

``partitions/<pid>/MANIFEST`` in the store's root, a §6 frame (magic ``QMAN``) whose
body holds the writer's epoch, ``high`` (the highest seq ever published), the seqs
that are gone (``deleted_floor`` and ``deleted_above``) and one entry per live segment
in columns (what retention, status and planning read of a ``.meta``).

Every write goes through an :class:`~quiver_spark.objects.ObjectStore`: the first by
``create`` (if absent), every later one by ``replace`` at the version it was read
at. A change is a pure function of the manifest it applies to, so a ``replace``
that lost a race re-reads and applies it again: a writer's publication and a
retention pass of another process both land, whatever their order. A manifest
written under a higher epoch than the caller's fences it (:class:`FencedError`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import repeat
from typing import Any, NamedTuple, Protocol

from ..errors import (
    CorruptionError,
    FencedError,
    ObjectExists,
)
from ..format import (
    FRAME_SIZE,
    MAGIC_MANIFEST,
    decode_frame,
    encode_frame,
)
from ..layout import manifest as manifest_key
from ..layout import writer_lease as writer_lease_key
from ..objects import ObjectStore
from ..seams import SegmentInfo
from . import cas
from .lease import stored_epoch
from .txn_retirement import TxnRetirement

log = logging.getLogger(__name__)

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
"""The entry columns of the body's ``segments`` map, in this order (§6.7)."""
_OPTIONAL = {"min_event_time", "max_event_time"}
TXN_COLUMNS = ("txns", "sealed_by")
"""Optional entry columns of an object root (§6.7, §12.6): the ids of the transactions
whose rows the segment holds (a list of int per entry) and, for a segment published
from a staged transaction, the lease epoch of its sealer (int or nil). Written only
when some entry has a value: a manifest without them reads as "no transactions"."""
TXNS_GONE_KEEP = 4096
"""Transaction ids of entries retention removed that the manifest keeps (newest)."""
RECLAIMED = "reclaimed"
"""The optional body key of :class:`ReclaimedTotals` (§6.7): absent while zero."""


class ReclaimedTotals(NamedTuple):
    """What retention's deletions took out of a manifest since it began counting
    (§6.7, body key ``reclaimed``): the segments whose entry it dropped, their rows and
    the range of their ingestion times. Counting begins with the manifest (one written
    before the key existed, or rebuilt from a listing, begins at zero), so ``segments``
    never exceeds the seqs the ack log records deleted (retention records them there
    before their entries go, §8.7); where the two counts are equal, the rows and times
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
    """Object root: the transactions whose rows this segment holds (§12.6)."""
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
    partition's writer records it at each publication, §12.6): a staged object of such
    an id is garbage. 0 in a manifest written without it."""
    txn_high: int = 0
    """Object root: every transaction id <= it not in ``txns_open`` is sealed or decided
    against (§12.6); the writer records it with ``txn_floor``, which a transaction
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
        """Transaction ids whose rows a segment published here holds or held (§12.6)."""
        out = set(self.txns_gone)
        for e in self.entries:
            out.update(e.txns)
        return out

    def seals(self, txn_id: int) -> bool:
        """Whether staged transaction ``txn_id`` needs no seal: a segment published
        here holds or held it, or it is retired (:meth:`retired`, §12.6)."""
        return self.retired(txn_id) or txn_id in self.sealed_txns()

    @cached_property
    def retirement(self) -> TxnRetirement:
        """The transactions the writer recorded retired (§12.6): ``txn_floor``,
        ``txn_high`` and ``txns_open``."""
        return TxnRetirement(self.txn_floor, self.txn_high, frozenset(self.txns_open))

    def retired(self, txn_id: int) -> bool:
        """Whether transaction ``txn_id`` is sealed or decided against by what the
        writer recorded (:meth:`TxnRetirement.retired`, §12.6)."""
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
        """These facts joined with ``kept``'s (a partition's GONE, §12.4): every seq
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
        ``reclaimed`` (retention's deletion, §8.7): the entries dropped are counted in
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
        # object roots only (§12.6): absent while empty, so other manifests keep their bytes
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


def _gone_grew(before: Manifest, after: Manifest) -> bool:
    """Whether a change recorded a seq gone or a transaction sealed and retired."""
    return (
        after.deleted_floor != before.deleted_floor
        or after.deleted_above != before.deleted_above
        or after.txns_gone != before.txns_gone
    )


def empty(partition: str) -> Manifest:
    return Manifest(partition)


class Facts(Protocol):
    """Where a root keeps the facts a listing cannot tell besides each MANIFEST (§12.4)."""

    def kept(self, partition: str) -> Manifest | None:
        """The facts kept for ``partition``; None when there are none to join."""

    def keep(self, manifest: Manifest) -> None:
        """Join ``manifest``'s facts into those kept; OSError when they cannot be."""


class NoFacts:
    """A POSIX root's: a MANIFEST rebuilt there relies on its files and the ack log."""

    def kept(self, partition: str) -> Manifest | None:
        return None

    def keep(self, manifest: Manifest) -> None:
        return None


NO_FACTS = NoFacts()


@dataclass
class ManifestStats:
    """What readers met (for logs, metrics and tests)."""

    reads: int = 0
    damaged: int = 0
    """Reads that found the manifest failing verification (the listing was used)."""
    built: int = 0
    """Manifests written from a listing (the one-time upgrade, or after damage)."""


class ManifestStore:
    """The manifests of a root's partitions, through ``objects``.

    ``epoch`` is the writer's (0 on a POSIX root; the lease epoch on an object root).
    The version of the manifest this instance last wrote is remembered per partition,
    so a writer's next change costs one ``replace`` (no read) while nobody else wrote.
    """

    def __init__(self, objects: ObjectStore, *, epoch: int = 0, facts: Facts = NO_FACTS) -> None:
        self.objects = objects
        self.epoch = epoch
        self.facts = facts
        """Where the seqs gone and transactions sealed are kept besides the MANIFEST:
        on an object root ``partitions/<pid>/GONE`` (§12.4, :mod:`.gone`), which a
        MANIFEST rebuilt from a listing after damage joins (a listing cannot tell what
        is gone); nowhere on a POSIX root."""
        self.stats = ManifestStats()
        self._last: dict[str, Manifest] = {}
        self._claimed: dict[str, int] = {}
        self._confirm: dict[str, Callable[[], None]] = {}

    def claim(self, partition: str, epoch: int, confirm: Callable[[], None] | None = None) -> None:
        """This handle writes ``partition`` under lease epoch ``epoch``: its next change
        stores that epoch (fencing every earlier writer), and a stored epoch above it
        fences this handle. Partitions not claimed (a retention pass of another
        process) are changed at whatever epoch they hold, never fenced. ``confirm``
        (the lease's, one GET) raises LeaseLostError unless the lease is still this
        handle's: asked before a MANIFEST that fails verification (whose epoch cannot
        be read) is rewritten, so damage never lifts the fence (§12.7)."""
        self._claimed[partition] = epoch
        if confirm is not None:
            self._confirm[partition] = confirm
        self._last.pop(partition, None)

    def unclaim(self, partition: str) -> None:
        """This handle no longer writes ``partition`` (a sealer that released its lease)."""
        self._claimed.pop(partition, None)
        self._confirm.pop(partition, None)
        self._last.pop(partition, None)

    def _epoch(self, partition: str) -> int:
        return self._claimed.get(partition, self.epoch)

    def check_fence(self, partition: str) -> Manifest | None:
        """Before a claimed holder makes a segment's ``.meta`` (§12.4): one HEAD of the
        MANIFEST; a version other than the one this handle holds makes it read it (one
        GET), and a higher epoch there raises FencedError. So a holder fenced before it
        reaches its ``.meta`` leaves no ``.meta`` behind (an orphan ``.arrow`` is never
        read by anyone); only one paused between this look and its create can, and its
        MANIFEST change is refused all the same. Returns the MANIFEST as it stands (None
        when it cannot be read), so the caller can see a seq recorded gone meanwhile."""
        if partition not in self._claimed:
            return None
        cur = self._last.get(partition)
        version = self.objects.head(manifest_key(partition))
        if cur is not None and cur.version is not None and version == cur.version:
            return cur
        self._last.pop(partition, None)
        if version is None:
            confirm = self._confirm.get(partition)
            if confirm is not None:
                confirm()
            return None
        try:
            m = self.read(partition)
        except CorruptionError:
            confirm = self._confirm.get(partition)
            if confirm is not None:
                confirm()
            return None
        if m is None:
            return None
        mine = self._epoch(partition)
        if m.epoch > mine:
            raise FencedError(self.display(partition), mine, m.epoch)
        self._last[partition] = m
        return m

    def epoch_of(self, partition: str) -> int:
        """The epoch this handle writes ``partition`` at (its claim, else its own)."""
        return self._epoch(partition)

    def _built_epoch(self, partition: str) -> int:
        """The epoch a MANIFEST written from a listing carries: this handle's, and never
        below the one the partition's writer lease records (one GET), so a reader's or
        a retention pass's rebuild never lowers the fence (§12.7)."""
        return max(self._epoch(partition), stored_epoch(self.objects, writer_lease_key(partition)))

    def display(self, partition: str) -> str:
        return self.objects.display(manifest_key(partition))

    def forget(self, partition: str) -> None:
        self._last.pop(partition, None)

    def read(self, partition: str) -> Manifest | None:
        """The manifest as stored now (one GET); None when there is none. A damaged
        one raises CorruptionError (callers fall back to a listing)."""
        got = self.objects.get(manifest_key(partition))
        self.stats.reads += 1
        if got is None:
            return None
        try:
            m = Manifest.decode(self.display(partition), got.data, got.version)
        except CorruptionError:
            self.stats.damaged += 1
            raise
        if m.partition != partition:
            self.stats.damaged += 1
            raise CorruptionError(
                self.display(partition), FRAME_SIZE, f"manifest names partition {m.partition}"
            )
        return m

    def create(self, manifest: Manifest) -> Manifest | None:
        """Store ``manifest`` (made from a listing, joined with the partition's GONE
        copy) if the partition has none; None when one appeared first."""
        manifest = self._with_kept(manifest)
        epoch = self._built_epoch(manifest.partition)
        try:
            version = self.objects.create(
                manifest_key(manifest.partition), manifest.at_epoch(epoch).encode()
            )
        except ObjectExists:
            return None
        self.stats.built += 1
        out = replace(manifest.at_epoch(epoch), version=version)
        self._last[manifest.partition] = out
        return out

    def update(
        self,
        partition: str,
        change: Callable[[Manifest], Manifest],
        *,
        build: Callable[[], Manifest],
    ) -> Manifest:
        """Apply ``change`` to the stored manifest and store the result (If-Match the
        version it applied to); a lost race re-reads and applies it again. ``build``
        makes the manifest from a listing when there is none or it is damaged.

        Raises FencedError when the stored manifest has a higher epoch than ours; an
        OSError other than a precondition leaves the outcome unknown: nothing is
        remembered, and the caller's retry applies ``change`` again (it is idempotent).
        """
        key = manifest_key(partition)
        mine = self._epoch(partition)
        fenced = partition in self._claimed or self.epoch > 0
        read_cur: list[Manifest | None] = [None]  # what the last read found

        def read() -> cas.Current[Manifest]:
            cur = self._last.get(partition)
            if cur is None:
                try:
                    cur = self.read(partition)
                except CorruptionError as e:
                    log.warning("quiver.manifest.damaged path=%s error=%s (rebuilt)", key, e)
                    read_cur[0] = None
                    # rewritten at the damaged version (gone meanwhile: created)
                    return cas.Current(None, self.objects.head(key))
            read_cur[0] = cur
            return cas.Current(cur, cur.version if cur is not None else None)

        def apply(cur: Manifest | None) -> Manifest | None:
            try:
                return applied(cur)
            except BaseException:
                self._last.pop(partition, None)
                raise

        def applied(cur: Manifest | None) -> Manifest | None:
            if cur is not None and fenced and cur.epoch > mine:
                raise FencedError(self.display(partition), mine, cur.epoch)
            if cur is None:
                # never below the newest holder's epoch, whoever writes it
                return change(self._with_kept(build())).at_epoch(
                    max(mine, self._built_epoch(partition))
                )
            new = change(cur)
            if new is cur and cur.epoch >= mine:
                return None  # nothing to change: no write
            return new.at_epoch(mine)

        def fence() -> None:
            if read_cur[0] is None and fenced:
                # missing or unreadable: its epoch cannot be read, so only a holder
                # whose lease is still its own may write it from a listing (§12.7)
                confirm = self._confirm.get(partition)
                if confirm is not None:
                    confirm()

        written = cas.update(
            self.objects,
            key,
            apply,
            read=read,
            encode=lambda new: new.encode(),
            fence=fence,
            lost=lambda: self._last.pop(partition, None),
            give_up=lambda attempts: OSError(
                f"{self.display(partition)}: {attempts} conditional writes in a row lost"
            ),
        )
        cur = read_cur[0]
        if written is None:
            assert cur is not None
            return cur
        if cur is None:
            self.stats.built += 1
        out = replace(written.value, version=written.version)
        self._last[partition] = out
        if _gone_grew(cur or empty(partition), out):
            self._keep_best_effort(out)
        return out

    def _with_kept(self, built: Manifest) -> Manifest:
        """A MANIFEST made from a listing, joined with the partition's GONE copy."""
        kept = self.facts.kept(built.partition)
        return built if kept is None else built.with_facts(kept)

    def _keep_best_effort(self, manifest: Manifest) -> None:
        try:
            self.facts.keep(manifest)
        except OSError as e:  # retention wrote its removals before this change (§12.4)
            log.warning(
                "quiver.manifest.gone_unwritten partition=%s error=%s (the next change "
                "that records a seq gone writes it again)",
                manifest.partition,
                e,
            )
