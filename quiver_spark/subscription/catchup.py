"""A consumer's catch-up order: oldest first, or newest first with a backfill
(ARCHITECTURE.md §19).

``oldest`` (the default) admits segments oldest first by ingestion time
(:meth:`SegmentPlanner.plan`). ``newest`` serves, per batch, the newest unread
segments first and spends the rest of the batch's admission budget on the backlog,
walked from newest to oldest, until the two meet. Per partition a position then holds
two cursors (:class:`~quiver_spark.subscription.position.Position`):

* the **head**: ``segments[p]``, the highest seq served; new segments above it are read
  by the head, newest first when the partition has no backlog (the head jumps to the
  top and what it did not take becomes the backlog), in seq order when it has one (a
  partition never holds two backlogs);
* the **backfill**: ``backlog[p] = (lo, hi)``, the one range below the head not served
  yet; the backfill reads it from ``hi`` down, so it shrinks from the top and is gone
  when it meets ``lo - 1``, the seq through which everything was served.

A batch from position ``start`` to ``end`` reads the seqs ``end`` includes and ``start``
does not (:func:`batch_spans`): a pure function of the two positions, so a replay
reads the same segments, and acknowledging ``end`` records exactly the seqs it
includes, so the ack log holds the backlog as the subscriber's undone seqs below its
done ones (hwm plus gap set, §13.4) and retention keeps those segments (§15.1).

While both cursors have work the head gets ``head_share`` of every cap of the batch
(at least one segment) and the backfill the rest (at least one segment when
``max_segments`` is 2 or more); either gets the whole budget when the other has no
work. When the caps leave the backfill nothing (``max_segments`` of 1, or a byte or
row cap below what the head took plus a backlog segment), the backfill still gets
about ``1 - head_share`` of those batches, its turns counted from the start position
(:func:`_backfill_turn`): on a turn the head waits one trigger and the backfill gets
the whole budget, so a steady writer cannot starve the backlog. A position with a
backlog planned ``oldest`` (a query whose order was switched) drains the backlog
first, then reads new segments in seq order: the order changes, nothing is skipped.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
from collections.abc import Callable, Iterable, Mapping

from ..errors import ConfigError, OffsetFormatError
from .planning import UNLIMITED, Available, Caps, SegmentPlanner
from .position import Position

log = logging.getLogger(__name__)

DEFAULT_HEAD_SHARE = 0.75
"""The share of a batch's caps the head gets while the backfill has work too."""


class CatchUpOrder(enum.Enum):
    """Which unread segments a consumer's batches take first."""

    OLDEST = "oldest"
    NEWEST = "newest"

    @classmethod
    def parse(cls, value: CatchUpOrder | str, option: str = "catch_up_order") -> CatchUpOrder:
        """``oldest`` or ``newest``, any case; anything else is refused naming both."""
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower()
        for order in cls:
            if order.value == text:
                return order
        raise ConfigError(option, value, "oldest (the default) or newest")


def parse_head_share(value: object, option: str = "catch_up_head_share") -> float:
    """A share of the caps, greater than 0 and at most 1."""
    try:
        share = float(str(value).strip()) if not isinstance(value, float) else value
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise ConfigError(option, value, "a number greater than 0 and at most 1, such as 0.75")
    return share


def given_head_share(
    order: CatchUpOrder,
    value: object | None,
    option: str = "head_share",
    order_option: str = "order",
) -> float | None:
    """A head share given with ``order`` (None: not given, the default applies).

    The share divides a batch between the head and the backfill, which only newest
    first has: a share given with ``oldest`` (named or the default) would be ignored, so
    it is refused naming both settings. A bad share is refused as a bad value first."""
    if value is None:
        return None
    share = parse_head_share(value, option)
    if order is not CatchUpOrder.NEWEST:
        err = ConfigError(option, value, f"only with {order_option}=newest")
        err.args = (
            f"{option} applies only with {order_option}=newest; got {option}={value} with "
            f"{order_option}={order.value} (set {order_option}=newest, or leave {option} out)",
        )
        raise err
    return share


# -- what a batch reads --------------------------------------------------------------------
Spans = list[tuple[int, int]]


def _included(pos: Position, p: str) -> Spans:
    head = pos.get(p)
    span = pos.backlog.get(p)
    if span is None:
        return [(1, head)] if head else []
    lo, hi = span
    return [r for r in ((1, lo - 1), (hi + 1, head)) if r[0] <= r[1]]


def _minus(a: Spans, b: Spans) -> Spans:
    """The integers of ``a`` not in ``b`` (sorted disjoint inclusive ranges)."""
    out: Spans = []
    for lo, hi in a:
        for blo, bhi in b:
            if bhi < lo or blo > hi:
                continue
            if blo > lo:
                out.append((lo, blo - 1))
            lo = bhi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


def batch_spans(start: Position, end: Position) -> list[tuple[str, int, int]]:
    """The inclusive seq ranges ``(partition, lo, hi)`` that ``end`` includes and ``start``
    does not: the head's ranges first (every partition), then the backfill's, highest
    first. Refuses (:class:`OffsetFormatError`) an ``end`` that leaves out a seq
    ``start`` includes: no position of a planner does."""
    heads: list[tuple[str, int, int]] = []
    backfill: list[tuple[str, int, int]] = []
    for p in sorted(set(start.segments) | set(end.segments)):
        before, after = _included(start, p), _included(end, p)
        if _minus(before, after):
            raise OffsetFormatError(
                f"offsets out of order in partition {p!r}: the batch's end "
                f"{_describe(end, p)} leaves out seqs its start {_describe(start, p)} included"
            )
        top = start.get(p)
        for lo, hi in _minus(after, before):
            (heads if lo > top else backfill).append((p, lo, hi))
    backfill.sort(key=lambda s: -s[2])
    return heads + backfill


def _describe(pos: Position, p: str) -> str:
    span = pos.backlog.get(p)
    return f"{pos.get(p)}" + (f" (backlog {span[0]}..{span[1]})" if span else "")


# -- where an embedded consumer is ---------------------------------------------------------
def resumed_position(
    hwm: Callable[[str], int], done_above: Callable[[str], Iterable[int]], partitions: Iterable[str]
) -> Position:
    """Where a subscriber reading newest first is, from its ack log: per partition the
    head at its highest done seq and the backlog from its mark up to the run of done
    seqs that ends there (other done seqs in the backlog are passed over by whoever
    reads it: they are done)."""
    segments: dict[str, int] = {}
    backlog: dict[str, tuple[int, int]] = {}
    for p in partitions:
        mark = hwm(p)
        done = set(done_above(p))
        if not done:
            if mark:
                segments[p] = mark
            continue
        head = back = max(done)
        while back - 1 in done:
            back -= 1
        segments[p] = head
        if back - 1 > mark:
            backlog[p] = (mark + 1, back - 1)
    return Position(segments, backlog)


# -- planning -------------------------------------------------------------------------------
class _Budget:
    def __init__(self) -> None:
        self.n = self.nbytes = self.rows = 0

    def over(self, caps: Caps, a: Available) -> bool:
        size = a.meta.size_bytes if a.meta else 0
        count = a.meta.rows if a.meta else 0
        return (
            (caps.max_segments is not None and self.n + 1 > caps.max_segments)
            or (caps.max_bytes is not None and self.nbytes + size > caps.max_bytes)
            or (caps.max_rows is not None and self.rows + count > caps.max_rows)
        )

    def add(self, a: Available) -> None:
        self.n += 1
        self.nbytes += a.meta.size_bytes if a.meta else 0
        self.rows += a.meta.rows if a.meta else 0


def _share(caps: Caps, share: float) -> Caps:
    """The head's caps while the backfill has work too (it keeps at least one segment
    of a ``max_segments`` of 2 or more)."""

    def part(cap: int | None) -> int | None:
        return None if cap is None else max(1, int(cap * share))

    segments = part(caps.max_segments)
    if segments is not None and caps.max_segments is not None and caps.max_segments >= 2:
        segments = min(segments, caps.max_segments - 1)
    return Caps(segments, part(caps.max_bytes), part(caps.max_rows))


def _newest(a: Available) -> int:
    return -(a.meta.max_ingestion_ns if a.meta else 0)


def _walk(
    queues: Mapping[str, list[Available]], limits: list[tuple[_Budget, Caps]]
) -> dict[str, list[Available]]:
    """Take from the front of each queue, the newest front first, while every budget
    stays within its caps (the batch's first segment is always taken: ``limits[0]`` is
    the batch's total)."""
    heap = [(_newest(q[0]), p, 0) for p, q in queues.items() if q]
    heapq.heapify(heap)
    taken: dict[str, list[Available]] = {}
    total = limits[0][0]
    while heap:
        _, p, i = heap[0]
        a = queues[p][i]
        if total.n and any(budget.over(caps, a) for budget, caps in limits):
            break
        for budget, _caps in limits:
            budget.add(a)
        taken.setdefault(p, []).append(a)
        heapq.heappop(heap)
        if i + 1 < len(queues[p]):
            heapq.heappush(heap, (_newest(queues[p][i + 1]), p, i + 1))
    return taken


def plan_catch_up(
    planner: SegmentPlanner,
    after: Position,
    caps: Caps = UNLIMITED,
    until: Position | None = None,
    *,
    newest: bool = True,
    head_share: float = DEFAULT_HEAD_SHARE,
    skip: Callable[[str, int], bool] | None = None,
) -> Position:
    """The end of the next batch after ``after`` with two cursors (the module
    docstring): newest first, or (``newest`` false, for a position that holds a
    backlog) the backlog first and then new segments in seq order. The head never
    passes ``until``; ``skip`` names backlog seqs already done (passed over, never
    counted). At least one segment when any is available."""
    avail = planner.available(after)
    heads = dict(after.segments)
    backlog = dict(after.backlog)
    for p in avail:
        heads.setdefault(p, 0)
    planner.latest = Position(
        {p: max(h, avail[p][-1].seq if avail.get(p) else 0) for p, h in heads.items()}
    )
    new: dict[str, list[Available]] = {}
    back: dict[str, list[Available]] = {}
    for p, v in avail.items():
        ceiling = until.get(p) if until is not None else None
        fresh = [a for a in v if a.seq > heads[p] and (ceiling is None or a.seq <= ceiling)]
        if fresh:
            # a partition with a backlog reads new segments in seq order (one backlog
            # at most), one without one newest first (the head jumps to the top)
            jumps = newest and p not in backlog
            new[p] = fresh[::-1] if jumps else fresh
        if p in backlog:
            lo, hi = backlog[p]
            back[p] = [
                a for a in reversed(v) if lo <= a.seq <= hi and not (skip and skip(p, a.seq))
            ]
    total = _Budget()
    if newest:
        backfills = any(back.values())
        plan = _plan_newest(heads, backlog, back, new, caps, head_share, backfills)
        if backfills and not plan[3] and _backfill_turn(after, plan[2], head_share):
            # the caps left the backfill nothing: on its turn the head waits a trigger
            plan = _plan_newest(heads, backlog, back, {}, caps, head_share, backfills)
        heads, backlog, _, _, total = plan
    else:
        _shrink_backlogs(backlog, back, _walk(back, [(total, caps)]))
        taken = _walk(new, [(total, caps)])
        _advance_heads(heads, backlog, {}, new, taken, jumped=False)
    end = Position({p: h for p, h in heads.items() if h or p in after.segments}, backlog)
    if total.n:
        log.debug(
            "quiver.source.plan order=%s segments=%d bytes=%d rows=%d end=%s backlog=%s",
            "newest" if newest else "oldest",
            total.n,
            total.nbytes,
            total.rows,
            end.segments,
            end.backlog,
        )
    return end


def _plan_newest(
    heads: Mapping[str, int],
    backlog: Mapping[str, tuple[int, int]],
    back: Mapping[str, list[Available]],
    new: Mapping[str, list[Available]],
    caps: Caps,
    head_share: float,
    backfills: bool,
) -> tuple[dict[str, int], dict[str, tuple[int, int]], int, int, _Budget]:
    """One newest-first plan on copies: the heads and backlogs after it, how many
    segments the head and the backfill took, and the batch's budget."""
    heads, backlog, back = dict(heads), dict(backlog), dict(back)
    total = _Budget()
    head_caps = _share(caps, head_share) if backfills else caps
    taken = _walk(new, [(total, caps), (_Budget(), head_caps)])
    _advance_heads(heads, backlog, back, new, taken, jumped=True)
    filled = _walk(back, [(total, caps)])
    _shrink_backlogs(backlog, back, filled)
    count = lambda t: sum(len(v) for v in t.values())  # noqa: E731
    return heads, backlog, count(taken), count(filled), total


def _backfill_turn(after: Position, head_took: int, head_share: float) -> bool:
    """Whether a batch whose caps leave the backfill nothing goes to the backfill
    instead (the head waits one trigger). With ``n`` the seqs ``after`` includes, the
    head's ``head_took`` seqs would count it on to ``n + head_took``; the backfill's
    turn is when that passes a multiple of ``1 / (1 - head_share)``. Every count is
    passed once whatever the batches' sizes, so the backfill gets about
    ``1 - head_share`` of those batches (none with a share of 1), and the decision is
    a function of the start position and the store, as the rest of the plan is."""
    n = sum(after.included(p) for p in after.segments)
    rest = 1 - head_share
    return math.floor((n + head_took) * rest) > math.floor(n * rest)


def _advance_heads(
    heads: dict[str, int],
    backlog: dict[str, tuple[int, int]],
    back: dict[str, list[Available]],
    new: Mapping[str, list[Available]],
    taken: Mapping[str, list[Available]],
    *,
    jumped: bool,
) -> None:
    """Move each head past what it took; a head that jumped over new segments leaves
    them as its partition's backlog (``back``: what the backfill may take this batch)."""
    for p, got in taken.items():
        if not jumped or p in backlog:
            heads[p] = got[-1].seq
            continue
        lowest = got[-1].seq
        below = [a for a in new[p] if a.seq < lowest]  # newest first, like ``back``
        if below:
            backlog[p] = (heads[p] + 1, lowest - 1)
            back[p] = below
        heads[p] = got[0].seq


def _shrink_backlogs(
    backlog: dict[str, tuple[int, int]],
    back: Mapping[str, list[Available]],
    taken: Mapping[str, list[Available]],
) -> None:
    """Each backlog ends below the lowest seq its backfill took; one with nothing left
    to read (the rest deleted, or done) is gone."""
    for p in list(backlog):
        lo, _ = backlog[p]
        got = taken.get(p, [])
        rest = back.get(p, [])[len(got) :]
        if not rest:
            del backlog[p]
        elif got:
            backlog[p] = (lo, got[-1].seq - 1)


__all__ = [
    "DEFAULT_HEAD_SHARE",
    "CatchUpOrder",
    "batch_spans",
    "given_head_share",
    "parse_head_share",
    "plan_catch_up",
    "resumed_position",
]
