"""Retention's decision: which segments a pass deletes and whether intake throttles.

:func:`decide_retention` is pure: given the retained segments, the subscribers'
progress, the config, the caller's ``now_ns`` and WAL sizes, it returns a
:class:`RetentionPlan`. It never reads a clock and does no I/O; the pass that carries
a plan out is :func:`quiver_spark.retention.apply_retention`. Precedence of the three
layers (time, steady state, size cap): ARCHITECTURE.md §15.1.

A segment whose ``.meta`` fails verification (damaged) is never chosen: its ``.arrow``
bytes count toward the size cap like WAL bytes.
"""

from __future__ import annotations

import functools
import heapq
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .config import RetentionConfig, SizeCapPolicy
from .retained import RetainedIndex
from .seams import NO_DELETIONS, DamagedInfo, DeletedMarks, RetentionView, SegmentInfo

log = logging.getLogger(__name__)

NS_PER_HOUR = 3_600_000_000_000

Key = tuple[str, int]


class _Witnessed:
    """``registry`` plus subscribers known only by their subscription record (§13.8):
    the ack log lost their registration (damage), so nothing is done for them but
    what retention already recorded deleted; they pin every other segment."""

    def __init__(self, registry: RetentionView, names: Sequence[str]) -> None:
        self.registry = registry
        self.names = sorted(names)

    def done_summary(self, partition: str) -> tuple[int, set[int]]:
        floor, above = self.registry.deleted_marks(partition)
        return floor, set(above)

    def undone_by(self, partition: str, seq: int) -> list[str]:
        own = [] if self.registry.deleted_marks(partition).holds(seq) else self.names
        return sorted({*self.registry.undone_by(partition, seq), *own})

    def deleted_marks(self, partition: str) -> DeletedMarks:
        return self.registry.deleted_marks(partition)


def witnessed(registry: RetentionView, unregistered: Sequence[str]) -> RetentionView:
    """The view retention plans with: ``registry``, and if some subscribers have a
    record but no registration in the ack log, those pinning everything not deleted."""
    if not unregistered:
        return registry
    log.warning(
        "quiver.subscriber.unregistered_record subscribers=%s: a subscription record "
        "exists but the ack log does not register it (a damaged ack log?); every "
        "segment it may not have read is kept until `quiver subscribers PATH add NAME` "
        "registers it again or `quiver subscribers PATH remove NAME` releases it",
        ",".join(sorted(unregistered)),
    )
    return _Witnessed(registry, unregistered)


class _NoSubscribers:
    """The registry view of a store nobody subscribed to yet (dry runs create nothing)."""

    def done_summary(self, partition: str) -> tuple[int, set[int]]:
        return 0, set()

    def undone_by(self, partition: str, seq: int) -> list[str]:
        return []

    def deleted_marks(self, partition: str) -> DeletedMarks:
        return NO_DELETIONS


NO_SUBSCRIBERS = _NoSubscribers()


@dataclass
class RetentionPlan:
    """The decision of one retention pass. Lists hold ``(partition, seq)`` in order."""

    delete_steady: list[Key] = field(default_factory=list)
    delete_time: list[Key] = field(default_factory=list)
    delete_size: list[Key] = field(default_factory=list)  # fully processed, size pressure
    drop_size: list[Key] = field(default_factory=list)  # unprocessed, drop_oldest only
    drop_records: dict[Key, list[str]] = field(default_factory=dict)  # seg -> subscribers
    throttle: bool = False
    throttled_partitions: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    cap_bytes: int | None = None
    reasons: list[str] = field(default_factory=list)
    damaged: list[Key] = field(default_factory=list)  # kept: metadata unreadable
    held: list[Key] = field(default_factory=list)
    """Kept this pass: something that must go before them could not (their leftover
    staged objects, §10.2); never chosen, their bytes count."""

    def hold(self, keys: Iterable[Key], sizes: Mapping[Key, int]) -> None:
        """Keep ``keys`` after all (something that must precede their deletion failed
        once the plan was final): out of every deletion list, into :attr:`held`, their
        bytes (``sizes``) back in :attr:`bytes_after`."""
        out = set(keys)
        if not out:
            return
        for name in ("delete_steady", "delete_time", "delete_size", "drop_size"):
            kept = [k for k in getattr(self, name) if k not in out]
            self.bytes_after += sum(sizes.get(k, 0) for k in getattr(self, name) if k in out)
            setattr(self, name, kept)
        for k in out:
            self.drop_records.pop(k, None)
        self.held = sorted({*self.held, *out})

    def deletions(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for p, s in self.delete_steady + self.delete_time + self.delete_size + self.drop_size:
            out.setdefault(p, []).append(s)
        return {p: sorted(v) for p, v in out.items()}


def decide_retention(
    listing: Mapping[str, Sequence[SegmentInfo]] | RetainedIndex,
    registry: RetentionView,
    config: RetentionConfig,
    now_ns: int,
    wal_bytes_by_partition: Mapping[str, int] | None = None,
    *,
    per_partition_cap: bool = False,
    n_partitions: int | None = None,
    damaged: Sequence[DamagedInfo] = (),
    held: Iterable[Key] = (),
) -> RetentionPlan:
    """Decide deletions and throttling. Pure: no I/O, no clock.

    ``listing`` is partition -> segments, or a :class:`RetainedIndex` (whose damaged
    segments then count; ``damaged`` is for a plain listing). ``per_partition_cap``
    selects a cap per partition (each partition enforces ``size_cap / n_partitions``
    alone); the default is one shared cap with global oldest-first eviction across
    partitions. ``damaged`` segments are never chosen; their bytes count like WAL
    bytes (present, not removable by retention).

    The cost does not grow with the retained segments: what is done is read from each
    partition's done floor (:meth:`SubscriberRegistry.done_summary`), the bytes from the
    index's running sums; segments are visited only when chosen, when processed and
    kept as headroom, or when ingestion times are out of seq order.
    """
    if isinstance(listing, RetainedIndex):
        index = listing
    else:
        index = RetainedIndex.from_listing(listing, damaged)
    wal = dict(wal_bytes_by_partition or {})
    for d in index.damaged():
        wal[d.partition] = wal.get(d.partition, 0) + d.size_bytes
    pl = RetentionPlan(cap_bytes=config.size_cap_bytes)
    pl.damaged = [(d.partition, d.seq) for d in index.damaged()]
    if pl.damaged:
        pl.reasons.append(f"damaged: {len(pl.damaged)} segments kept (quiver fsck --quarantine)")
    parts = index.partitions()
    summary = {p: registry.done_summary(p) for p in parts}

    def done(p: str, seq: int) -> bool:
        floor, above = summary[p]
        return seq <= floor or seq in above

    chosen = _Chosen()
    chosen.keys.update(held)  # never chosen; their bytes stay counted
    pl.held = sorted(k for k in held if index.get(*k) is not None)
    if pl.held:
        pl.reasons.append(f"held: {len(pl.held)} segments kept until what goes first can")

    # 1. time: older than the window goes whatever its ack state (dropped recorded)
    if config.max_age_hours is not None:
        window = int(config.max_age_hours * NS_PER_HOUR)
        for p in parts:
            for s in index.expired(p, now_ns - window):
                key = (p, s.seq)
                if key in chosen:
                    continue
                chosen.add(s)
                if done(p, s.seq):
                    pl.delete_steady.append(key)
                else:
                    pl.delete_time.append(key)
                    pl.drop_records[key] = registry.undone_by(p, s.seq)
        if pl.delete_time:
            pl.reasons.append(f"time: {len(pl.delete_time)} segments past the window")

    # 2. steady state: done by every subscriber, minus the newest `headroom` bytes
    processed: list[SegmentInfo] = []
    for p in parts:
        floor, above = summary[p]
        processed.extend(s for s in index.through(p, floor) if (p, s.seq) not in chosen)
        for seq in sorted(above):
            hit = index.get(p, seq)
            if hit is not None and (p, seq) not in chosen:
                processed.append(hit)
    processed.sort(key=lambda s: (s.max_ingestion_ns, s.partition, s.seq), reverse=True)
    condemned = {p: registry.deleted_marks(p) for p in parts}

    def kept_as_headroom(s: SegmentInfo) -> bool:  # never one a pass already condemned
        return not condemned[s.partition].holds(s.seq)

    spool, kept = [], 0
    for s in processed:
        if kept + s.size_bytes <= config.steady_state_headroom_bytes and kept_as_headroom(s):
            kept += s.size_bytes
            spool.append(s)
        else:
            pl.delete_steady.append((s.partition, s.seq))
            chosen.add(s)
    spool.reverse()  # oldest first

    # 3. size cap over WAL + segments
    def remaining(ps: Iterable[str]) -> int:
        return sum(wal.get(p, 0) + index.part_bytes(p) - chosen.bytes.get(p, 0) for p in ps)

    all_parts = sorted(set(parts) | set(wal))
    pl.bytes_before = sum(wal.values()) + index.total_bytes()
    if config.size_cap_bytes is not None:
        enforce = functools.partial(
            _enforce, pl, index, spool, done, chosen, remaining,
            policy=config.size_cap_policy, registry=registry,
        )  # fmt: skip
        if per_partition_cap:
            n = max(n_partitions or len(all_parts), 1)
            for p in all_parts:
                if enforce([p], config.size_cap_bytes // n):
                    pl.throttled_partitions.append(p)
        elif enforce(all_parts, config.size_cap_bytes):
            pl.throttled_partitions = all_parts
        pl.throttle = bool(pl.throttled_partitions)
        if pl.throttle:
            pl.reasons.append(f"size: over cap, throttling {pl.throttled_partitions}")
    pl.bytes_after = remaining(all_parts)
    return pl


class _Chosen:
    """The segments a plan has chosen so far, with their bytes per partition."""

    def __init__(self) -> None:
        self.keys: set[Key] = set()
        self.bytes: dict[str, int] = {}

    def add(self, s: SegmentInfo) -> None:
        self.keys.add((s.partition, s.seq))
        self.bytes[s.partition] = self.bytes.get(s.partition, 0) + s.size_bytes

    def __contains__(self, key: object) -> bool:
        return key in self.keys


def _enforce(
    pl: RetentionPlan,
    index: RetainedIndex,
    spool: list[SegmentInfo],
    done: Callable[[str, int], bool],
    chosen: _Chosen,
    remaining: Callable[[Iterable[str]], int],
    parts: list[str],
    cap: int,
    *,
    policy: SizeCapPolicy,
    registry: RetentionView,
) -> bool:
    """Evict within ``parts`` until under ``cap``; True if still over (throttle)."""
    total = remaining(parts)
    if total <= cap:
        return False
    members = set(parts)
    for s in spool:  # (a) fully processed first, oldest first
        if total <= cap:
            break
        if s.partition in members and (s.partition, s.seq) not in chosen:
            pl.delete_size.append((s.partition, s.seq))
            chosen.add(s)
            total -= s.size_bytes
    if total <= cap:
        return False
    if policy is SizeCapPolicy.BACKPRESSURE:
        return True

    # (b) drop_oldest: per-partition seq order, partitions merged by ingestion time
    def unchosen(p: str) -> Iterator[SegmentInfo]:
        return (s for s in index.from_front(p) if (p, s.seq) not in chosen)

    queues = {p: unchosen(p) for p in parts}
    heads: list[tuple[int, str, int, SegmentInfo]] = []
    for p, q in queues.items():
        first = next(q, None)
        if first is not None:
            heapq.heappush(heads, (first.min_ingestion_ns, p, first.seq, first))
    while heads and total > cap:
        _, p, seq, s = heapq.heappop(heads)
        key = (p, seq)
        chosen.add(s)
        total -= s.size_bytes
        if done(p, seq):
            pl.delete_size.append(key)
        else:
            pl.drop_size.append(key)
            pl.drop_records[key] = registry.undone_by(p, seq)
        nxt = next(queues[p], None)
        if nxt is not None:
            heapq.heappush(heads, (nxt.min_ingestion_ns, p, nxt.seq, nxt))
    return total > cap  # only WAL left: nothing more retention can remove
