"""The retained-segment index: what a retention pass and its gauges read, kept current
without listing or reading every retained segment on each pass (ARCHITECTURE.md
§15.1, "What a pass reads").

Three facts make that possible. Seqs of a partition are gapless (§5), so the segments
published since the last look are found by reading the metadata of the seqs after the
highest one seen, until one is not there. Published metadata never changes (§11.2), so
it is read once. Every deletion by retention, in any process, is recorded in the ack
log before a file goes (§15.1), so what other processes deleted is read from the ack
log the pass refreshes anyway.

Where the location keeps publication hints (§12), an incremental update starts with
one listing of them: it names the partitions, stands for the quarantine mark, and
tells which partitions announced a seq above the highest one the index knows; only
those (and the unhinted ones) are probed, a partition whose MANIFEST copy at hand
already reaches its hint (the writer's own publication) with no request. On an object
root, where the MANIFEST is the publication point (§11.3), a partition read so costs
that one read: its new segments are taken from their MANIFEST entries (size, rows,
ingestion and event times), no ``.meta`` is read, and the ``.meta`` of a segment a
pass chooses is read when it is checked before deletion (a damaged one is kept,
named and recorded damaged there, as before). On a POSIX root the ``.meta`` decides
and is read as before. What was
removed from a partition it skips is what the ack log and the checks before a
deletion tell, as before; what it cannot see is a publication no hint announced (a
writer of an earlier version): that is found by the listing survey below, so a
deletion it delays waits at most :data:`RESURVEY_PERIOD_S`.

A *full survey* rebuilds the index from each partition's view: its MANIFEST (one
read) plus a probe of the seqs after its ``high`` (§11.1). It runs when the index is
new (a new process reads one manifest per partition, never every ``.meta``), after a
pass failed, and before any pass decides to drop data a subscriber has not finished
(time window, ``drop_oldest``: an index never drops data on a view older than the
pass). What the manifest may not know (a segment moved aside by ``quiver fsck
--quarantine`` through another catalog, a file removed by hand) is caught by a
*listing survey*: one listing of every partition, metadata from cache, when the
location's quarantine mark changed since the index last looked (§5.4) and every
:data:`RESURVEY_PERIOD_S` as a safety net; never on a process's first pass.

A partition's segments are held in seq order with running byte and row sums, so the
bytes of a partition, a subscriber's lag and the segments below a seq cost a bisection,
not a walk; segments leave from the front (the usual order of retention) in O(1).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable

from .errors import InvalidArgumentError
from .seams import (
    DamagedInfo,
    DeletedMarks,
    DeletedSegments,
    LocationCatalog,
    SegmentCatalog,
    SegmentInfo,
)

RESURVEY_PERIOD_S = 300.0
"""A long-lived index lists every partition this often (and in the cases above)."""

_COMPACT_AT = 1024  # front-trimmed entries kept before the lists are compacted


Key = tuple[str, int]


class Lag(NamedTuple):
    """What a subscriber has not done in a partition (:meth:`RetainedIndex.lag`): its
    segments, their bytes, the oldest ``min_ingestion_ns`` among them (None: nothing
    behind) and their rows."""

    segments: int
    bytes: int
    oldest_ns: int | None
    rows: int


class _View(Protocol):
    @property
    def entries(self) -> Sequence[SegmentInfo]: ...
    @property
    def damaged(self) -> Sequence[DamagedInfo]: ...
    @property
    def high(self) -> int: ...


class _Look(Protocol):
    @property
    def partitions(self) -> Sequence[str]: ...
    @property
    def mark(self) -> str | None: ...
    @property
    def hints(self) -> Mapping[str, int]: ...


@runtime_checkable
class HintedCatalog(Protocol):
    """A catalog that keeps publication hints (``SegmentLocation``, §12): ``look`` is
    one listing of them (None where the storage cannot list a level), and
    ``probe_next`` takes the hints it gave, and with ``entries`` answers from the
    MANIFEST entries where the MANIFEST is the publication point (no ``.meta`` read)."""

    def look(self) -> _Look | None: ...

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None = None,
        *,
        hints: Mapping[str, int] | None = None,
        entries: bool = False,
    ) -> Mapping[str, Sequence[SegmentInfo | DamagedInfo]]: ...


@runtime_checkable
class ViewCatalog(Protocol):
    """A catalog with per-partition manifests (``SegmentLocation``): ``view`` is one
    manifest read plus a probe; ``listed_view`` the same from a listing."""

    def view(self, partition: str) -> _View: ...

    def listed_view(self, partition: str) -> _View: ...


def _is_damaged(found: SegmentInfo | DamagedInfo) -> TypeGuard[DamagedInfo]:
    """A probe's answer for a seq whose metadata is unreadable (it names its error)."""
    return hasattr(found, "error")


def _is_readable(found: SegmentInfo | DamagedInfo) -> TypeGuard[SegmentInfo]:
    return not _is_damaged(found)


class _Part:
    """One partition's readable segments in seq order; ``infos[lo:]`` are live."""

    __slots__ = (
        "cum", "cum_rows", "deleted_mark", "infos", "lo", "max_sorted", "min_sorted", "seqs",
        "top", "version",
    )  # fmt: skip

    def __init__(self, top: int = 0) -> None:
        self._reset(top)

    def _reset(self, top: int) -> None:
        self.infos: list[SegmentInfo] = []
        self.seqs: list[int] = []
        self.cum: list[int] = []  # cum[i]: bytes of infos[0..i]
        self.cum_rows: list[int] = []  # cum_rows[i]: rows of infos[0..i]
        self.lo = 0
        self.top = top  # highest seq seen published (readable or damaged) or deleted
        self.max_sorted = True  # max_ingestion_ns nondecreasing in seq order
        self.min_sorted = True  # min_ingestion_ns likewise
        self.deleted_mark: tuple[int, int] | None = None  # ack log's DELETED (floor, count) seen
        self.version = 0  # changes whenever the live segments change

    def __len__(self) -> int:
        return len(self.seqs) - self.lo

    def append(self, info: SegmentInfo) -> None:
        if self.seqs and info.seq <= self.seqs[-1]:
            raise InvalidArgumentError(
                "segment seq",
                info.seq,
                f"above the last one appended, {self.seqs[-1]}",
                f"segment {info.seq} appended after {self.seqs[-1]}",
            )
        if len(self):
            last = self.infos[-1]
            self.max_sorted &= info.max_ingestion_ns >= last.max_ingestion_ns
            self.min_sorted &= info.min_ingestion_ns >= last.min_ingestion_ns
        self.version += 1
        self.infos.append(info)
        self.seqs.append(info.seq)
        self.cum.append((self.cum[-1] if self.cum else 0) + info.size_bytes)
        self.cum_rows.append((self.cum_rows[-1] if self.cum_rows else 0) + info.rows)
        self.top = max(self.top, info.seq)

    def extend(self, infos: Iterable[SegmentInfo]) -> None:
        ordered = sorted(infos, key=lambda s: s.seq)
        if self.seqs or not ordered:
            for info in ordered:
                self.append(info)
            return
        # a whole partition at once (a survey): the same lists, built in bulk
        seqs = [i.seq for i in ordered]
        if len(set(seqs)) != len(seqs):
            raise InvalidArgumentError(
                "segment seqs", seqs, "each seq once", f"segment seqs repeat in {seqs}"
            )
        hi = [i.max_ingestion_ns for i in ordered]
        lo = [i.min_ingestion_ns for i in ordered]
        self.infos, self.seqs = ordered, seqs
        self.cum = list(itertools.accumulate(i.size_bytes for i in ordered))
        self.cum_rows = list(itertools.accumulate(i.rows for i in ordered))
        self.max_sorted = all(a <= b for a, b in itertools.pairwise(hi))
        self.min_sorted = all(a <= b for a, b in itertools.pairwise(lo))
        self.top = max(self.top, seqs[-1])
        self.version += 1

    def bytes_from(self, i: int) -> int:
        """Bytes of ``infos[i:]`` (``i >= lo``)."""
        if i >= len(self.seqs):
            return 0
        return self.cum[-1] - (self.cum[i - 1] if i > 0 else 0)

    def rows_from(self, i: int) -> int:
        """Rows of ``infos[i:]`` (``i >= lo``)."""
        if i >= len(self.seqs):
            return 0
        return self.cum_rows[-1] - (self.cum_rows[i - 1] if i > 0 else 0)

    @property
    def bytes(self) -> int:
        return self.bytes_from(self.lo)

    def index(self, seq: int) -> int | None:
        i = bisect.bisect_left(self.seqs, seq, self.lo)
        return i if i < len(self.seqs) and self.seqs[i] == seq else None

    def live(self) -> list[SegmentInfo]:
        return self.infos[self.lo :]

    def remove(self, doomed: Iterable[int]) -> None:
        """Drop ``doomed`` seqs (absent ones ignored): O(1) each from the front."""
        doomed = set(doomed)
        if not doomed:
            return
        self.version += 1
        while self.lo < len(self.seqs) and self.seqs[self.lo] in doomed:
            doomed.discard(self.seqs[self.lo])
            self.lo += 1
        rest = [s for s in doomed if self.index(s) is not None]
        if rest:
            gone = set(rest)
            self._rebuild([i for i in self.live() if i.seq not in gone])
        elif self.lo >= _COMPACT_AT and self.lo * 2 >= len(self.seqs):
            self._rebuild(self.live())

    def recorded_deleted(self, floor: int, above: AbstractSet[int]) -> list[int]:
        """Live seqs the ack log records deleted: at or below ``floor`` or in ``above``.

        Costs the deleted front plus the smaller of ``above`` and the partition.
        """
        cut = bisect.bisect_right(self.seqs, floor, self.lo)
        out = self.seqs[self.lo : cut]
        if len(above) <= len(self.seqs) - cut:
            out.extend(s for s in above if s > floor and self.index(s) is not None)
        else:
            out.extend(s for s in self.seqs[cut:] if s in above)
        return out

    def _rebuild(self, infos: list[SegmentInfo]) -> None:
        top, mark, version = self.top, self.deleted_mark, self.version
        self._reset(top)
        self.extend(infos)
        self.top, self.deleted_mark, self.version = top, mark, version + 1


class RetainedIndex:
    """The readable published segments of every partition and the damaged ones,
    kept current by :meth:`sync` (see the module docstring)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._parts: dict[str, _Part] = {}
        self._damaged: dict[Key, DamagedInfo] = {}
        self._clock = clock
        self._surveyed_at: float | None = None
        self._mark: bytes | None = None  # the location's quarantine mark at the last sync
        self._marked = False  # _mark was read once (the first sync never counts it a change)
        self._listed_at: float | None = None
        self._lag: dict[tuple[str, str], tuple[tuple[int, int, int], Lag]]
        self._lag = {}
        self._head: dict[tuple[str, int], tuple[int, Lag]] = {}  # (partition, above) -> lag
        self.surveyed = False
        """True when the last :meth:`sync` was a full survey."""

    @classmethod
    def from_listing(
        cls,
        listing: Mapping[str, Sequence[SegmentInfo]],
        damaged: Iterable[DamagedInfo] = (),
    ) -> RetainedIndex:
        """An index of exactly ``listing`` (partition -> segments) and ``damaged``."""
        index = cls()
        for p, infos in listing.items():
            index._parts[p] = _Part()
            index._parts[p].extend(infos)
        for d in damaged:
            index._damaged[(d.partition, d.seq)] = d
            index._parts.setdefault(d.partition, _Part())
        index.surveyed = True
        return index

    # -- keeping current ----------------------------------------------------------------
    def invalidate(self) -> None:
        """Make the next :meth:`sync` a full survey (after a failed pass)."""
        self._surveyed_at = None

    def sync(
        self,
        catalog: SegmentCatalog,
        deleted: DeletedSegments | None,
        *,
        full: bool = False,
        listing: bool = False,
    ) -> None:
        """Bring the index up to date with ``catalog`` (a ``SegmentLocation``).

        ``deleted`` is the ack log as of now (refreshed by the caller); without it,
        or when ``catalog`` is not a :class:`LocationCatalog` (it cannot
        ``probe_next``), every sync is a full survey. ``listing`` makes it a listing
        survey (``quiver gc --full``).
        """
        now = self._clock()
        located = catalog if isinstance(catalog, LocationCatalog) else None
        hinted = catalog if isinstance(catalog, HintedCatalog) else None
        # one listing of the publication hints (§12) names the partitions and their
        # newest hints, and gives the quarantine hint's version in place of the mark
        seen = hinted.look() if hinted is not None and located is not None else None
        if seen is not None:
            mark = seen.mark.encode() if seen.mark else None
        else:
            mark = located.quarantine_mark() if located is not None else None
        first = self._surveyed_at is None
        moved_aside = mark != self._mark and self._marked
        self._mark, self._marked = mark, True
        due = self._listed_at is not None and now - self._listed_at >= RESURVEY_PERIOD_S
        listing = listing or (not first and (moved_aside or due))
        if full or listing or first or deleted is None or located is None:
            self._survey(catalog, deleted, listing=listing)
            if listing or self._listed_at is None:
                self._listed_at = now  # the period of the listing safety net runs from here
            self._surveyed_at = now
            self.surveyed = True
            return
        self.surveyed = False
        marks: dict[str, DeletedMarks] = {}
        finished: dict[str, list[int]] = {}  # deleted by others since the last sync
        for p in seen.partitions if seen is not None else located.partitions():
            part = self._parts.get(p)
            if part is None:
                part = self._parts[p] = _Part()
            facts = marks[p] = deleted.deleted_marks(p)
            if part.deleted_mark != facts.version:
                # another process's pass deleted these; one that died between its
                # records and its unlinks left files this pass deletes (as a survey would)
                # for the seqs this index held; those it never held are the listing
                # survey's (RESURVEY_PERIOD_S)
                recorded = part.recorded_deleted(facts.floor, facts.above)
                deleted_here = [q for q in recorded if not located.is_published(p, q)]
                part.remove(deleted_here)
                finished.setdefault(p, []).extend(deleted_here)
                part.deleted_mark = facts.version

        def gone(p: str, seq: int) -> bool:
            """Published and deleted before this index saw it."""
            if marks[p].holds(seq) and not located.is_published(p, seq):
                finished.setdefault(p, []).append(seq)
                return True
            return False

        starts = {p: self._parts[p].top + 1 for p in marks}
        if seen is not None and hinted is not None:
            # a partition whose newest hint is not above the highest seq this index
            # knows published nothing since (a hint comes before its publication): no
            # request; one without a hint is probed as before
            starts = {p: s for p, s in starts.items() if seen.hints.get(p, s) >= s}
            found = hinted.probe_next(starts, gone, hints=seen.hints, entries=True)
        else:
            found = located.probe_next(starts, skip=gone, entries=True)
        for p, new in found.items():
            part = self._parts[p]
            for f in new:
                self._add(p, part, f)
            part.top = max([part.top, *finished.get(p, ())])
        # a deletion that died between its unlinks left .arrow files: finish it
        for p, seqs in finished.items():
            located.finish_deletes(p, seqs)

    def _survey(
        self, catalog: SegmentCatalog, deleted: DeletedSegments | None, *, listing: bool = False
    ) -> None:
        located = catalog if isinstance(catalog, LocationCatalog) else None
        viewing = catalog if isinstance(catalog, ViewCatalog) else None
        parts: dict[str, _Part] = {}
        damaged: dict[Key, DamagedInfo] = {}
        unfinished: dict[str, list[int]] = {}
        for p in catalog.partitions():
            old = self._parts.get(p)
            part = parts[p] = _Part(old.top if old is not None else 0)
            if deleted is not None:
                facts = deleted.deleted_marks(p)
                part.deleted_mark = facts.version
                part.top = max(part.top, part.deleted_mark[0])
                if old is not None:  # recorded deleted while this index still held them
                    unfinished[p] = old.recorded_deleted(facts.floor, facts.above)
            metas: list[SegmentInfo]
            bad: list[DamagedInfo]
            if viewing is not None:
                view = viewing.listed_view(p) if listing else viewing.view(p)
                metas, bad = list(view.entries), list(view.damaged)
                part.top = max(part.top, view.high)
            elif located is None:
                metas, bad = list(catalog.list(p)), []
            else:
                found = located.survey(p)
                metas, bad = list(found.metas), list(found.damaged)
            part.extend(metas)
            for d in bad:
                damaged[(p, d.seq)] = d
                part.top = max(part.top, d.seq)
            if unfinished.get(p):
                seen = {*(m.seq for m in metas), *(d.seq for d in bad)}
                unfinished[p] = [q for q in unfinished[p] if q not in seen]
        # a pass that failed (or died) after its DELETED records may have left files a
        # view no longer names (the manifest dropped them first): the ack log's facts
        # say they go, so they go now; a failure keeps the old index to try again
        for p, seqs in unfinished.items():
            if seqs:
                catalog.delete(p, seqs)
        self._parts, self._damaged = parts, damaged
        self._lag.clear()
        self._head.clear()

    def _add(self, p: str, part: _Part, found: SegmentInfo | DamagedInfo) -> None:
        if _is_damaged(found):  # a DamagedSegment: kept, named, counted
            self._damaged[(p, found.seq)] = found
            part.top = max(part.top, found.seq)
        elif _is_readable(found):
            part.append(found)

    def remove(
        self, deletions: Mapping[str, Iterable[int]], deleted: DeletedSegments | None = None
    ) -> None:
        """Forget segments this process deleted; with ``deleted`` (the ack log after
        this process recorded them), its DELETED facts count as already followed."""
        for p, seqs in deletions.items():
            part = self._parts.get(p)
            if part is not None:
                part.remove(seqs)
                if deleted is not None:
                    part.deleted_mark = deleted.deleted_marks(p).version

    def mark_damaged(self, found: Iterable[DamagedInfo]) -> None:
        """Segments found failing verification: out of the readable ones (never chosen
        again), kept and counted as damaged."""
        for d in found:
            part = self._parts.setdefault(d.partition, _Part())
            part.remove([d.seq])
            self._damaged[(d.partition, d.seq)] = d
            part.top = max(part.top, d.seq)
        self._lag.clear()
        self._head.clear()

    # -- reading ------------------------------------------------------------------------
    def partitions(self) -> list[str]:
        return sorted(self._parts)

    def damaged(self) -> list[DamagedInfo]:
        return [self._damaged[k] for k in sorted(self._damaged)]

    def part_bytes(self, partition: str) -> int:
        part = self._parts.get(partition)
        return part.bytes if part is not None else 0

    def total_bytes(self) -> int:
        return sum(p.bytes for p in self._parts.values())

    def segments(self, partition: str) -> list[SegmentInfo]:
        """Every retained readable segment of ``partition`` in seq order (a copy)."""
        part = self._parts.get(partition)
        return part.live() if part is not None else []

    def listing(self) -> dict[str, list[SegmentInfo]]:
        """Partition -> segments, as a full listing would give them (walks everything)."""
        return {p: self.segments(p) for p in self.partitions()}

    def get(self, partition: str, seq: int) -> SegmentInfo | None:
        part = self._parts.get(partition)
        i = part.index(seq) if part is not None else None
        return part.infos[i] if i is not None and part is not None else None

    def through(self, partition: str, floor: int) -> list[SegmentInfo]:
        """Segments of ``partition`` with seq <= ``floor``, in seq order."""
        part = self._parts.get(partition)
        if part is None:
            return []
        return part.infos[part.lo : bisect.bisect_right(part.seqs, floor, part.lo)]

    def expired(self, partition: str, before_ns: int) -> list[SegmentInfo]:
        """Segments of ``partition`` whose newest row was ingested before ``before_ns``,
        in seq order (a walk from the front while ingestion times are in seq order)."""
        part = self._parts.get(partition)
        if part is None:
            return []
        if not part.max_sorted:
            return [s for s in part.live() if s.max_ingestion_ns < before_ns]
        out = []
        for i in range(part.lo, len(part.infos)):
            s = part.infos[i]
            if s.max_ingestion_ns >= before_ns:
                break
            out.append(s)
        return out

    def from_front(self, partition: str) -> Iterator[SegmentInfo]:
        """Segments of ``partition`` oldest seq first, lazily."""
        part = self._parts.get(partition)
        if part is None:
            return iter(())
        return (part.infos[i] for i in range(part.lo, len(part.infos)))

    def lag_of(self, sub: str, partition: str, hwm: int, done_above: AbstractSet[int]) -> Lag:
        """:meth:`lag` remembered per (subscriber, partition) until the subscriber's
        marks or the partition change (a subscriber's done-set only grows: the same
        ``hwm`` and number of gaps is the same set)."""
        part = self._parts.get(partition)
        key = (hwm, len(done_above), part.version if part is not None else -1)
        hit = self._lag.get((sub, partition))
        if hit is not None and hit[0] == key:
            return hit[1]
        out = self.lag(partition, hwm, done_above)
        self._lag[(sub, partition)] = (key, out)
        return out

    def lag_above(self, partition: str, seq: int) -> Lag:
        """:meth:`lag` of everything above ``seq`` (a subscriber's head lag above the
        highest seq it acknowledged), remembered until the partition changes: every
        subscriber at the same seq shares it."""
        part = self._parts.get(partition)
        version = part.version if part is not None else -1
        hit = self._head.get((partition, seq))
        if hit is not None and hit[0] == version:
            return hit[1]
        out = self.lag(partition, seq, ())
        if len(self._head) > 2 * len(self._lag) + 1024:  # marks moved on: forget old seqs
            self._head.clear()
        self._head[(partition, seq)] = (version, out)
        return out

    def lag(self, partition: str, hwm: int, done_above: Iterable[int]) -> Lag:
        """The :class:`Lag` (segments, bytes, oldest ``min_ingestion_ns``, rows) of
        ``partition`` not done by a subscriber at ``hwm`` with ``done_above`` done
        beyond it."""
        part = self._parts.get(partition)
        if part is None or not len(part):
            return Lag(0, 0, None, 0)
        k = bisect.bisect_right(part.seqs, hwm, part.lo)
        n, b, r = len(part.seqs) - k, part.bytes_from(k), part.rows_from(k)
        skip = set()
        for g in done_above:
            if g > hwm and (j := part.index(g)) is not None:
                n -= 1
                b -= part.infos[j].size_bytes
                r -= part.infos[j].rows
                skip.add(g)
        oldest = None
        if n:
            if part.min_sorted:
                for i in range(k, len(part.infos)):
                    if part.seqs[i] not in skip:
                        oldest = part.infos[i].min_ingestion_ns
                        break
            else:
                oldest = min(
                    part.infos[i].min_ingestion_ns
                    for i in range(k, len(part.infos))
                    if part.seqs[i] not in skip
                )
        return Lag(n, b, oldest, r)
