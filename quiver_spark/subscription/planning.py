"""What a consumer plans next (ARCHITECTURE.md §18): the segments available after a
position, and a batch of them admitted under caps.

A :class:`SegmentPlanner` is one consumer's view of a store's segments. Its cost does
not grow with the retained segments: seqs are gapless (§5), so new segments are found
by probing the next seqs of each partition (passing over seqs the ack log records
deleted), metadata is read once (it is immutable once published, §11.2), a new
planner starts from each partition's MANIFEST (one read, §11.1), and every partition
is listed only when the quarantine mark changed (§5.4) or every
:data:`FULL_LISTING_PERIOD_S`. Admission takes segments oldest first by ingestion
time across partitions.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CorruptionError, SegmentMissingError
from ..segment import Look, SegmentLocation, SegmentMeta
from ..store import QuiverStore
from ..subscribers import SubscriberRegistry
from .position import Position

log = logging.getLogger(__name__)

FULL_LISTING_PERIOD_S = 300.0
"""A consumer lists every partition's segments when the location's quarantine mark
changed (§5.4) and otherwise only this often, as a safety net for files removed by
hand; in between it probes the next seqs (seqs are gapless, and a hole is a seq the
ack log records deleted or a known quarantined one), so planning does not grow with
retained segments."""


FIRST_VIEW_REUSE_S = 5.0
"""A new consumer's first plan takes a partition's view (its MANIFEST) that the same
handle took less than this long ago (the retention pass after the first trigger's
acknowledgement) instead of reading it again: what was published since is announced
by a hint the next poll sees (§12)."""


@dataclass(frozen=True)
class Caps:
    """Admission limits of one planned batch (None: unlimited). A batch always
    admits at least one segment, so a segment larger than a cap still progresses."""

    max_segments: int | None = None
    max_bytes: int | None = None
    max_rows: int | None = None

    def tightened(self, other: Caps) -> Caps:
        """The lower of each limit."""

        def lower(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return Caps(
            lower(self.max_segments, other.max_segments),
            lower(self.max_bytes, other.max_bytes),
            lower(self.max_rows, other.max_rows),
        )


UNLIMITED = Caps()
"""The caps of a batch without limits."""


@dataclass
class Available:
    """A segment available to plan (meta None: unreadable metadata, or quarantined)."""

    partition: str
    seq: int
    meta: SegmentMeta | None

    @property
    def order(self) -> int:
        return self.meta.min_ingestion_ns if self.meta else 0


class SegmentPlanner:
    """One consumer's view of the segments of ``store`` (see the module docstring);
    ``registry`` tells which seqs retention deleted."""

    def __init__(
        self,
        store: QuiverStore,
        registry: SubscriberRegistry,
        *,
        refresh: Callable[[], None] | None = None,
        partitions: Callable[[], list[str]] | None = None,
        look: Callable[[], Look | None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self._refresh = refresh or registry.refresh
        """Catches the ack log up (a subscription's: once per call of it)."""
        self._partitions = partitions or store.partitions
        """Lists the store's partitions (a subscription's: once per call of it)."""
        self._look = look or (lambda: self.location.look())
        """One listing of the segments location's root: the partitions, the quarantine
        mark's version and the publication hints (§12); a subscription's: once per
        call of it, and its partitions are the call's."""
        self.metas: dict[tuple[str, int], SegmentMeta | None] = {}
        self.meta_errors: dict[tuple[str, int], CorruptionError] = {}
        self.known: dict[str, list[int]] = {}
        self.quarantined: dict[str, set[int]] = {}
        self.latest: Position | None = None
        """Everything available at the last :meth:`plan` (for lag reporting)."""
        self._last_full_listing = float("-inf")
        self._quarantine_mark: bytes | None = None

    @property
    def location(self) -> SegmentLocation:
        return self.store.segment_location

    def meta(self, partition: str, seq: int) -> SegmentMeta | None:
        """Cached metadata (immutable once published); None when it fails verification.

        Raises SegmentMissingError when the segment is not published (any more).
        """
        key = (partition, seq)
        if key in self.metas:
            return self.metas[key]
        try:
            meta = self.location.published_meta(partition, seq)
        except CorruptionError as e:
            log.warning(
                "quiver.source.meta_corrupt partition=%s seq=%d error=%s", partition, seq, e
            )
            meta = None
            self.meta_errors[key] = e
        self.metas[key] = meta
        return meta

    def forget(self, through: Position) -> None:
        """Drop the cached metadata of seqs ``through`` covers (never planned again)."""
        self.metas = {k: v for k, v in self.metas.items() if not through.covers(*k)}
        self.meta_errors = {k: v for k, v in self.meta_errors.items() if not through.covers(*k)}

    def highest_seen(self, partition: str) -> int:
        """The highest seq of ``partition`` this planner has seen published (0: none)."""
        seqs = self.known.get(partition)
        return seqs[-1] if seqs else 0

    def available(self, after: Position) -> dict[str, list[Available]]:
        """Segments ``after`` does not include per partition (above it, and in its
        backlog, :mod:`quiver_spark.subscription.catchup`), ascending: the published ones and the
        quarantined ones (planning a quarantined seq is what reports its loss).

        Its cost does not grow with the retained segments: seqs are gapless (§5), so
        new segments are found by probing the next seqs of each partition (passing over
        seqs the ack log records deleted), and metadata is read once; every partition
        is listed only when the quarantine mark changed (§5.4) or every
        ``FULL_LISTING_PERIOD_S``.
        """
        known, quarantined = self._known_seqs()
        out: dict[str, list[Available]] = {}
        for p, seqs in known.items():
            floor = after.low(p)
            i = bisect.bisect_right(seqs, floor)
            del seqs[: max(0, i - 1)]  # never planned again from here on
            segs = []
            for seq in seqs:
                if after.covers(p, seq):  # served: its metadata is never read again
                    continue
                if self.registry.is_deleted(p, seq):
                    continue  # deleted since it was seen: never asked for again
                try:
                    segs.append(Available(p, seq, self.meta(p, seq)))
                except SegmentMissingError:
                    continue  # deleted since it was seen
            segs.extend(
                Available(p, q, None) for q in quarantined.get(p, ()) if not after.covers(p, q)
            )
            if segs:
                out[p] = sorted(segs, key=lambda a: a.seq)
        return out

    def _known_seqs(self) -> tuple[dict[str, list[int]], dict[str, set[int]]]:
        now = time.monotonic()
        seen = self._look()
        # the quarantine mark's version from the same listing, else its bytes (one read)
        mark = seen.mark.encode() if seen is not None and seen.mark else None
        if seen is None:
            mark = self.location.quarantine_mark()
        first = self._last_full_listing == float("-inf")
        if (
            first
            or now - self._last_full_listing >= FULL_LISTING_PERIOD_S
            or mark != self._quarantine_mark
        ):
            known: dict[str, list[int]] = {}
            quarantined: dict[str, set[int]] = {}
            parts = self._partitions()
            if seen is not None:  # the hints name the partitions between listings
                parts = sorted({*parts, *self.location.partitions()})
            for p in parts:
                if first:  # a new consumer: the partition's MANIFEST and a probe past it
                    # the view the retention pass of this very call took serves
                    view = self.location.view(p, reuse_s=FIRST_VIEW_REUSE_S)
                    known[p] = sorted([e.seq for e in view.entries] + [d.seq for d in view.damaged])
                else:
                    known[p] = self.location.published_seqs(p)
                gone = set(self.location.quarantined(p)) - set(known[p])
                if gone:
                    quarantined[p] = gone
            # kept only once the whole listing succeeded: a failed one is retried
            self.known, self.quarantined = known, quarantined
            self._last_full_listing, self._quarantine_mark = now, mark
            return self.known, self.quarantined
        self._refresh()
        starts = {}
        for p in self._partitions():  # one listing of partition names
            seqs = self.known.setdefault(p, [])
            # every seq up to the ack log's deleted floor is gone: a partition whose
            # segments were all deleted is probed past its history, not through it
            floor, _ = self.registry.deleted_marks(p)
            starts[p] = max(seqs[-1] + 1 if seqs else 1, floor + 1)

        def hole(p: str, seq: int) -> bool:  # deleted before this consumer saw it, or moved aside
            return seq in self.quarantined.get(p, ()) or self.registry.is_deleted(p, seq)

        if seen is not None:
            # a partition whose newest hint is below the next seq this consumer waits
            # for published nothing it has not seen (a hint comes before its
            # publication); one without a hint is looked at itself (§12)
            starts = {p: s for p, s in starts.items() if seen.hints.get(p, s) >= s}
        for p, new in self.location.probe_next(starts, skip=hole).items():
            self.known[p].extend(f.seq for f in new)
        return self.known, self.quarantined

    def top(self) -> Position:
        """The highest seq published or quarantined per partition (what exists now)."""
        return Position(
            {
                p: top
                for p in self._partitions()
                if (
                    top := max(
                        [*self.location.published_seqs(p), *self.location.quarantined(p)],
                        default=0,
                    )
                )
            }
        )

    def plan(
        self, after: Position, caps: Caps = UNLIMITED, until: Position | None = None
    ) -> Position:
        """The end of the next batch after ``after``: segments admitted oldest first
        (by ingestion time, across partitions) under ``caps``, never past ``until``;
        at least one segment when any is available."""
        avail = self.available(after)
        self.latest = after.merged({p: v[-1].seq for p, v in avail.items()})
        if until is not None:
            avail = {p: [a for a in v if a.seq <= until.get(p)] for p, v in avail.items()}
        heads = [(v[0].order, p, 0) for p, v in avail.items() if v]
        heapq.heapify(heads)
        admitted: dict[str, int] = {}
        n = nbytes = rows = 0
        while heads:
            _, p, i = heads[0]
            a = avail[p][i]
            size = a.meta.size_bytes if a.meta else 0
            count = a.meta.rows if a.meta else 0
            if n and (
                (caps.max_segments is not None and n + 1 > caps.max_segments)
                or (caps.max_bytes is not None and nbytes + size > caps.max_bytes)
                or (caps.max_rows is not None and rows + count > caps.max_rows)
            ):
                break
            n, nbytes, rows = n + 1, nbytes + size, rows + count
            admitted[p] = a.seq
            heapq.heappop(heads)
            if i + 1 < len(avail[p]):
                heapq.heappush(heads, (avail[p][i + 1].order, p, i + 1))
        end = after.merged(admitted)
        if admitted:
            log.debug(
                "quiver.source.plan segments=%d bytes=%d rows=%d end=%s",
                n,
                nbytes,
                rows,
                end.segments,
            )
        return end
