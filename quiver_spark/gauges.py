"""The gauges of subscribers' progress: ack-log depth, gap sets, lag, WAL and open bytes.

:func:`observe` publishes them from the ack log and the retained-segment index a
retention pass keeps current (ARCHITECTURE.md §20).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from . import metrics as m
from .retained import RetainedIndex
from .seams import GaugeSource, SegmentInfo


class LagSplit(NamedTuple):
    """A subscriber's lag in one partition (ARCHITECTURE.md §19, Progress): the
    segments it has not acknowledged, split into the *head lag* (above the highest seq
    it acknowledged) and the *backlog* (below it), each in segments, rows and oldest
    ingestion time. Ingestion times are epoch ns (None: nothing behind)."""

    segments: int
    bytes: int
    oldest_ns: int | None
    head_segments: int
    head_oldest_ns: int | None
    backlog_segments: int
    backlog_bytes: int
    rows: int
    head_rows: int
    backlog_rows: int


def lag_split(
    index: RetainedIndex, sub: str, partition: str, hwm: int, gaps: AbstractSet[int]
) -> LagSplit:
    """``sub``'s lag in ``partition`` at mark ``hwm`` with ``gaps`` done above it, the one
    computation ``quiver status`` and the gauges both show."""
    n, nbytes, oldest, rows = index.lag_of(sub, partition, hwm, gaps)
    head_n, head_bytes, head_oldest, head_rows = index.lag_above(partition, max(gaps, default=hwm))
    return LagSplit(
        n, nbytes, oldest, head_n, head_oldest, n - head_n, nbytes - head_bytes,
        rows, head_rows, rows - head_rows,
    )  # fmt: skip


class SubscriberLag(NamedTuple):
    """:class:`LagSplit` summed over a subscriber's partitions; ages in seconds."""

    segments: int
    bytes: int
    seconds: float
    head_segments: int
    head_seconds: float
    backlog_segments: int
    backlog_bytes: int
    backlog_seconds: float
    rows: int
    head_rows: int
    backlog_rows: int


def age_s(now_ns: int, oldest_ns: int | None) -> float:
    """Seconds since ``oldest_ns`` (0 when nothing is behind, or when the oldest segment
    behind records no ingestion time: 0, as a ``.meta`` written without one reads)."""
    return max(0.0, (now_ns - oldest_ns) / 1e9) if oldest_ns else 0.0


def subscriber_lag(parts: Iterable[LagSplit], now_ns: int) -> SubscriberLag:
    """A subscriber's lag from its partitions': counts summed, ages the oldest (the
    backlog's: the oldest unacknowledged segment of a partition that has one)."""
    rows = list(parts)

    def oldest(times: Iterable[int | None]) -> int | None:
        return min((t for t in times if t is not None), default=None)

    return SubscriberLag(
        sum(r.segments for r in rows),
        sum(r.bytes for r in rows),
        age_s(now_ns, oldest(r.oldest_ns for r in rows)),
        sum(r.head_segments for r in rows),
        age_s(now_ns, oldest(r.head_oldest_ns for r in rows)),
        sum(r.backlog_segments for r in rows),
        sum(r.backlog_bytes for r in rows),
        age_s(now_ns, oldest(r.oldest_ns for r in rows if r.backlog_segments)),
        sum(r.rows for r in rows),
        sum(r.head_rows for r in rows),
        sum(r.backlog_rows for r in rows),
    )


def observe(
    metrics: m.Metrics,
    registry: GaugeSource,
    listing: Mapping[str, Sequence[SegmentInfo]] | RetainedIndex,
    now_ns: int,
    *,
    wal_bytes: Mapping[str, int] | None = None,
    open_bytes: Mapping[str, int] | None = None,
) -> None:
    """Publish gauges: ack-log depth, gap sets, per-subscriber lag (and its split into
    head lag and backlog, :func:`lag_split`), WAL/open bytes.

    A subscriber's lag in a partition costs a bisection of the index at its mark and
    a look at its gaps, not a walk of the retained segments.
    """
    depth = registry.acklog_stats()
    metrics.set(m.ACKLOG_DEPTH_RECORDS, depth["records_since_checkpoint"])
    metrics.set(m.ACKLOG_DEPTH_BYTES, depth["bytes_since_checkpoint"])
    index = listing if isinstance(listing, RetainedIndex) else RetainedIndex.from_listing(listing)
    gap_sizes: dict[m.Labels, float] = {}
    # subscriber -> its partitions' lag
    lag: dict[str, list[LagSplit]] = {sub: [] for sub in registry.subscribers()}
    seen: set[tuple[str, str]] = set()

    def add(sub: str, p: str, hwm: int, gaps: AbstractSet[int]) -> None:
        lag.setdefault(sub, []).append(lag_split(index, sub, p, hwm, gaps))

    for sub, p, hwm, gaps in registry.marks_table():
        gap_sizes[(("partition", p), ("subscriber", sub))] = len(gaps)
        seen.add((sub, p))
        add(sub, p, hwm, gaps)
    no_gaps: set[int] = set()
    for p in index.partitions():  # partitions the ack log does not name yet
        for sub in lag:
            if (sub, p) not in seen:
                add(sub, p, 0, no_gaps)
    metrics.replace_gauge(m.GAP_SET_SIZE, gap_sizes)
    totals = {m.labels_key({"subscriber": s}): subscriber_lag(v, now_ns) for s, v in lag.items()}
    for name, field in (
        (m.LAG_SEGMENTS, "segments"),
        (m.LAG_BYTES, "bytes"),
        (m.LAG_SECONDS, "seconds"),
        (m.HEAD_LAG_SEGMENTS, "head_segments"),
        (m.HEAD_LAG_SECONDS, "head_seconds"),
        (m.HEAD_LAG_ROWS, "head_rows"),
        (m.BACKLOG_SEGMENTS, "backlog_segments"),
        (m.BACKLOG_BYTES, "backlog_bytes"),
        (m.BACKLOG_ROWS, "backlog_rows"),
        (m.BACKLOG_SECONDS, "backlog_seconds"),
    ):
        metrics.replace_gauge(name, {k: getattr(t, field) for k, t in totals.items()})
    for p, b in (wal_bytes or {}).items():
        metrics.set(m.WAL_BYTES, b, partition=p)
    for p, b in (open_bytes or {}).items():
        metrics.set(m.OPEN_SEGMENT_BYTES, b, partition=p)
