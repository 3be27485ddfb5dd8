"""The gauges of subscribers' progress: ack-log depth, gap sets, lag, WAL and open bytes.

:func:`observe` publishes them from the ack log and the retained-segment index a
retention pass keeps current (ARCHITECTURE.md §8.9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from . import metrics as m
from .retained import RetainedIndex
from .seams import GaugeSource, SegmentInfo


def observe(
    metrics: m.Metrics,
    registry: GaugeSource,
    listing: Mapping[str, Sequence[SegmentInfo]] | RetainedIndex,
    now_ns: int,
    *,
    wal_bytes: Mapping[str, int] | None = None,
    open_bytes: Mapping[str, int] | None = None,
) -> None:
    """Publish gauges: ack-log depth, gap sets, per-subscriber lag, WAL/open bytes.

    A subscriber's lag in a partition costs a bisection of the index at its mark and
    a look at its gaps, not a walk of the retained segments.
    """
    depth = registry.acklog_stats()
    metrics.set(m.ACKLOG_DEPTH_RECORDS, depth["records_since_checkpoint"])
    metrics.set(m.ACKLOG_DEPTH_BYTES, depth["bytes_since_checkpoint"])
    index = listing if isinstance(listing, RetainedIndex) else RetainedIndex.from_listing(listing)
    gap_sizes: dict[m.Labels, float] = {}
    # subscriber -> [segments, bytes, oldest ingestion] not done
    lag: dict[str, list[Any]] = {sub: [0, 0, None] for sub in registry.subscribers()}
    seen: set[tuple[str, str]] = set()

    def add(sub: str, p: str, hwm: int, gaps: AbstractSet[int]) -> None:
        n, b, first = index.lag_of(sub, p, hwm, gaps)
        acc = lag.setdefault(sub, [0, 0, None])
        acc[0] += n
        acc[1] += b
        if first is not None and (acc[2] is None or first < acc[2]):
            acc[2] = first

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
    for name, i in ((m.LAG_SEGMENTS, 0), (m.LAG_BYTES, 1)):
        metrics.replace_gauge(name, {m.labels_key({"subscriber": s}): v[i] for s, v in lag.items()})
    metrics.replace_gauge(
        m.LAG_SECONDS,
        {
            m.labels_key({"subscriber": s}): max(0, now_ns - v[2]) / 1e9 if v[2] else 0
            for s, v in lag.items()
        },
    )
    for p, b in (wal_bytes or {}).items():
        metrics.set(m.WAL_BYTES, b, partition=p)
    for p, b in (open_bytes or {}).items():
        metrics.set(m.OPEN_SEGMENT_BYTES, b, partition=p)
