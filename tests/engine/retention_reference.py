"""The retention planner as it was before the incremental index (test oracle).

It walks every retained segment and asks the registry about each one: obviously
right and slow. :func:`quiver_spark.retention_plan.decide_retention` must decide exactly what this
decides (``test_retained_index.py``). Precedence: ARCHITECTURE.md §15.1.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from quiver_spark.config import RetentionConfig, SizeCapPolicy
from quiver_spark.retention_plan import NS_PER_HOUR, RetentionPlan

SegmentInfo = Any
DamagedInfo = Any
RegistryView = Any
Key = tuple[str, int]


def reference_plan(
    listing: Mapping[str, Sequence[SegmentInfo]],
    registry: RegistryView,
    config: RetentionConfig,
    now_ns: int,
    wal_bytes_by_partition: Mapping[str, int] | None = None,
    *,
    per_partition_cap: bool = False,
    n_partitions: int | None = None,
    damaged: Sequence[DamagedInfo] = (),
) -> RetentionPlan:
    """Decide deletions and throttling. Pure: no I/O, no clock.

    ``per_partition_cap`` selects a cap per partition (each partition enforces
    ``size_cap / n_partitions`` alone); the default is one shared cap with global
    oldest-first eviction across partitions. ``damaged`` segments are never chosen;
    their bytes count like WAL bytes (present, not removable by retention).
    """
    wal = dict(wal_bytes_by_partition or {})
    for d in damaged:
        wal[d.partition] = wal.get(d.partition, 0) + d.size_bytes
    pl = RetentionPlan(cap_bytes=config.size_cap_bytes)
    pl.damaged = sorted((d.partition, d.seq) for d in damaged)
    if pl.damaged:
        pl.reasons.append(f"damaged: {len(pl.damaged)} segments kept (quiver fsck --quarantine)")
    segs = {p: sorted(v, key=lambda s: s.seq) for p, v in listing.items()}
    chosen: set[Key] = set()
    done = {
        (p, s.seq): registry.done_by_all(p, s.seq) or registry.is_deleted(p, s.seq)
        for p, v in segs.items()
        for s in v
    }

    # 1. time: older than the window goes whatever its ack state (dropped recorded)
    if config.max_age_hours is not None:
        window = int(config.max_age_hours * NS_PER_HOUR)
        for p, v in segs.items():
            for s in v:
                if now_ns - s.max_ingestion_ns > window:
                    key = (p, s.seq)
                    chosen.add(key)
                    if done[key]:
                        pl.delete_steady.append(key)
                    else:
                        pl.delete_time.append(key)
                        pl.drop_records[key] = registry.undone_by(p, s.seq)
        if pl.delete_time:
            pl.reasons.append(f"time: {len(pl.delete_time)} segments past the window")

    # 2. steady state: done by every subscriber, minus the newest `headroom` bytes
    processed = [
        s
        for v in segs.values()
        for s in v
        if done[(s.partition, s.seq)] and (s.partition, s.seq) not in chosen
    ]
    processed.sort(key=lambda s: (s.max_ingestion_ns, s.partition, s.seq), reverse=True)
    spool, kept = [], 0
    for s in processed:
        if kept + s.size_bytes <= config.steady_state_headroom_bytes and not registry.is_deleted(
            s.partition, s.seq
        ):  # a segment a pass already condemned (DELETED recorded) is never kept
            kept += s.size_bytes
            spool.append(s)
        else:
            pl.delete_steady.append((s.partition, s.seq))
            chosen.add((s.partition, s.seq))
    spool.reverse()  # oldest first

    # 3. size cap over WAL + segments
    def remaining(parts: Iterable[str]) -> int:
        return sum(wal.get(p, 0) for p in parts) + sum(
            s.size_bytes for p in parts for s in segs.get(p, []) if (p, s.seq) not in chosen
        )

    all_parts = sorted(set(segs) | set(wal))
    pl.bytes_before = remaining(all_parts) + sum(
        s.size_bytes for v in segs.values() for s in v if (s.partition, s.seq) in chosen
    )
    if config.size_cap_bytes is not None:
        if per_partition_cap:
            n = max(n_partitions or len(all_parts), 1)
            for p in all_parts:
                over = _enforce(
                    pl,
                    [p],
                    segs,
                    spool,
                    done,
                    chosen,
                    remaining,
                    config.size_cap_bytes // n,
                    config.size_cap_policy,
                    registry,
                )
                if over:
                    pl.throttled_partitions.append(p)
        elif _enforce(
            pl,
            all_parts,
            segs,
            spool,
            done,
            chosen,
            remaining,
            config.size_cap_bytes,
            config.size_cap_policy,
            registry,
        ):
            pl.throttled_partitions = all_parts
        pl.throttle = bool(pl.throttled_partitions)
        if pl.throttle:
            pl.reasons.append(f"size: over cap, throttling {pl.throttled_partitions}")
    pl.bytes_after = remaining(all_parts)
    return pl


def _enforce(
    pl: RetentionPlan,
    parts: list[str],
    segs: Mapping[str, list[SegmentInfo]],
    spool: list[SegmentInfo],
    done: Mapping[Key, bool],
    chosen: set[Key],
    remaining: Callable[[Iterable[str]], int],
    cap: int,
    policy: SizeCapPolicy,
    registry: RegistryView,
) -> bool:
    """Evict within ``parts`` until under ``cap``; True if still over (throttle)."""
    total = remaining(parts)
    if total <= cap:
        return False
    for s in spool:  # (a) fully processed first, oldest first
        if total <= cap:
            break
        if s.partition in parts and (s.partition, s.seq) not in chosen:
            pl.delete_size.append((s.partition, s.seq))
            chosen.add((s.partition, s.seq))
            total -= s.size_bytes
    if total <= cap:
        return False
    if policy is SizeCapPolicy.BACKPRESSURE:
        return True
    # (b) drop_oldest: per-partition seq order, partitions merged by ingestion time
    heads: list[tuple[int, str, int, int]] = []
    queues = {p: [s for s in segs.get(p, []) if (p, s.seq) not in chosen] for p in parts}
    for p, q in queues.items():
        if q:
            heapq.heappush(heads, (q[0].min_ingestion_ns, p, q[0].seq, 0))
    while heads and total > cap:
        _, p, seq, i = heapq.heappop(heads)
        s = queues[p][i]
        key = (p, seq)
        chosen.add(key)
        total -= s.size_bytes
        if done[key]:
            pl.delete_size.append(key)
        else:
            pl.drop_size.append(key)
            pl.drop_records[key] = registry.undone_by(p, seq)
        if i + 1 < len(queues[p]):
            nxt = queues[p][i + 1]
            heapq.heappush(heads, (nxt.min_ingestion_ns, p, nxt.seq, i + 1))
    return total > cap  # only WAL left: nothing more retention can remove
