"""Retention: which segments to delete, when to throttle intake, and the executor.

:func:`plan` is pure: given a listing, the subscribers' progress, the config, the
caller's ``now_ns`` and WAL sizes, it returns a :class:`RetentionPlan`. It never reads
a clock. :func:`apply_retention` runs a plan under the registry's exclusive lock:
``dropped`` + ``deleted`` records are made durable first, then segments are deleted.
Precedence of the three layers: ARCHITECTURE.md §8.7.

A segment whose ``.meta`` fails verification (damaged) is never deleted nor recorded
deleted or dropped by a pass: it stays where it is, named in the result, the log and
the ``quiver.segment.damaged`` gauge, until ``quiver fsck --quarantine`` moves it
aside; its ``.arrow`` bytes still count toward the size cap. Every other segment is
reclaimed as usual.
"""

from __future__ import annotations

import functools
import heapq
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from . import metrics as m
from .config import RetentionConfig, SizeCapPolicy
from .errors import StoreAtCapacityError
from .retained import RetainedIndex
from .seams import (
    NO_DELETIONS,
    DamagedInfo,
    DeletedMarks,
    GaugeSource,
    LockedLedger,
    RetentionLedger,
    RetentionView,
    SegmentCatalog,
    SegmentInfo,
)

log = logging.getLogger(__name__)

NS_PER_HOUR = 3_600_000_000_000
SEGMENT_DAMAGED = m.SEGMENT_DAMAGED  # {partition}: segments whose .meta fails verification


Key = tuple[str, int]


class _Witnessed:
    """``registry`` plus subscribers known only by their subscription record (§8.10):
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

    def deletions(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for p, s in self.delete_steady + self.delete_time + self.delete_size + self.drop_size:
            out.setdefault(p, []).append(s)
        return {p: sorted(v) for p, v in out.items()}


def plan(
    listing: Mapping[str, Sequence[SegmentInfo]] | RetainedIndex,
    registry: RetentionView,
    config: RetentionConfig,
    now_ns: int,
    wal_bytes_by_partition: Mapping[str, int] | None = None,
    *,
    per_partition_cap: bool = False,
    n_partitions: int | None = None,
    damaged: Sequence[DamagedInfo] = (),
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

    # 1. time: older than the window goes whatever its ack state (dropped recorded)
    if config.max_age_hours is not None:
        window = int(config.max_age_hours * NS_PER_HOUR)
        for p in parts:
            for s in index.expired(p, now_ns - window):
                key = (p, s.seq)
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


@dataclass
class RetentionResult:
    """What one :func:`apply_retention` pass did."""

    plan: RetentionPlan
    deleted: dict[str, list[int]]
    dropped: dict[str, dict[str, list[int]]]  # subscriber -> partition -> seqs
    damaged: list[DamagedInfo] = field(default_factory=list)  # kept, named
    sizes: dict[Key, int] = field(default_factory=dict)
    """Bytes of each segment the plan chose (deleted, or to delete in a dry run)."""
    expired: list[str] = field(default_factory=list)
    """Subscribers this pass deregistered under ``subscriber.expire_after``."""
    unregistered: list[str] = field(default_factory=list)
    """Subscribers with a record the ack log does not register: their data was kept."""

    @property
    def throttle(self) -> bool:
        return self.plan.throttle


def _chosen_sizes(index: RetainedIndex, pl: RetentionPlan) -> dict[Key, int]:
    out = {}
    for p, seqs in pl.deletions().items():
        for seq in seqs:
            s = index.get(p, seq)
            out[(p, seq)] = s.size_bytes if s is not None else 0
    return out


def apply_retention(
    catalog: SegmentCatalog,
    registry: LockedLedger,
    config: RetentionConfig,
    now_ns: int,
    *,
    wal_bytes: Mapping[str, int] | None = None,
    metrics: m.Metrics | None = None,
    per_partition_cap: bool = False,
    n_partitions: int | None = None,
    index: RetainedIndex | None = None,
    unregistered: Callable[[RetentionLedger], Sequence[str]] | None = None,
    on_dropped: Callable[[RetentionLedger, dict[str, int], dict[str, dict[str, list[int]]]], None]
    | None = None,
) -> RetentionResult:
    """Plan and execute one retention pass (the steady-state sweeper + safety nets).

    Under the registry's exclusive lock: bring ``index`` up to date (a long-lived one
    from the store; a new one surveys every partition), plan, durably record
    ``dropped`` (for every subscriber not done) and ``deleted`` for every segment about
    to go, then delete them through ``catalog.delete`` (which fsyncs the directory). A
    crash after the records and before the deletion is finished by a later pass.

    A decision to drop unfinished data (time window, ``drop_oldest``) is only ever made
    on a full survey of this pass: an incremental index is resurveyed and the pass
    planned again first. A segment with an unreadable ``.meta`` (when the catalog can
    ``survey``) is kept and reported in ``damaged``; it never stops the pass.

    ``unregistered(reg)`` (read under the lock) names subscribers that have a record
    but no registration in the ack log: everything not recorded deleted is kept for
    them (§8.10), and they are listed in the result.

    ``on_dropped(reg, before, dropped)`` is called under the lock after a deletion
    that dropped data for subscribers, with each subscriber's done count
    (``reg.done_count``) from before it.
    """
    index = RetainedIndex() if index is None else index
    lost: list[str] = []
    try:
        with registry.exclusive() as reg:
            index.sync(catalog, reg)
            lost = sorted(unregistered(reg)) if unregistered is not None else []
            view = witnessed(reg, lost)

            def decide() -> RetentionPlan:
                return plan(
                    index,
                    view,
                    config,
                    now_ns,
                    wal_bytes,
                    per_partition_cap=per_partition_cap,
                    n_partitions=n_partitions,
                )

            pl = decide()
            if (pl.delete_time or pl.drop_size) and not index.surveyed:
                index.sync(catalog, reg, full=True)
                pl = decide()
            deletions = pl.deletions()
            sizes = _chosen_sizes(index, pl)
            dropped: dict[str, dict[str, list[int]]] = {}
            if deletions:
                before = (
                    {n: reg.done_count(n) for n in reg.subscribers()}
                    if on_dropped is not None and (pl.delete_time or pl.drop_size)
                    else {}
                )
                dropped = reg.condemn(deletions)
                for p, seqs in deletions.items():
                    catalog.delete(p, seqs)
                index.remove(deletions, reg)
                if on_dropped is not None and dropped:
                    on_dropped(reg, before, dropped)
    except BaseException:
        index.invalidate()
        raise
    damaged = index.damaged()
    if deletions or pl.throttle:
        log.info(
            "quiver.gc.pass steady=%d time=%d size=%d dropped=%d throttle=%s bytes=%d->%d",
            len(pl.delete_steady),
            len(pl.delete_time),
            len(pl.delete_size),
            len(pl.drop_size),
            pl.throttle,
            pl.bytes_before,
            pl.bytes_after,
        )
    for d in damaged:
        log.warning(
            "quiver.gc.damaged_segment partition=%s seq=%d path=%s error=%s "
            "(kept, not reclaimed: `quiver fsck --quarantine` moves it aside)",
            d.partition,
            d.seq,
            d.path,
            d.error,
        )
    if metrics is not None:
        fixed = dict(wal_bytes or {})
        for d in damaged:
            fixed[d.partition] = fixed.get(d.partition, 0) + d.size_bytes
        _count(metrics, pl, dropped, index, fixed, config)
        metrics.clear_gauge(SEGMENT_DAMAGED)
        for p in sorted({d.partition for d in damaged}):
            metrics.set(SEGMENT_DAMAGED, sum(d.partition == p for d in damaged), partition=p)
    return RetentionResult(pl, deletions, dropped, damaged, sizes, unregistered=lost)


class _NoSubscribers:
    """The registry view of a store nobody subscribed to yet (dry runs create nothing)."""

    def done_summary(self, partition: str) -> tuple[int, set[int]]:
        return 0, set()

    def undone_by(self, partition: str, seq: int) -> list[str]:
        return []

    def deleted_marks(self, partition: str) -> DeletedMarks:
        return NO_DELETIONS


NO_SUBSCRIBERS = _NoSubscribers()


def plan_retention(
    catalog: SegmentCatalog,
    registry: RetentionView | None,
    config: RetentionConfig,
    now_ns: int,
    *,
    wal_bytes: Mapping[str, int] | None = None,
    unregistered: Sequence[str] = (),
) -> RetentionResult:
    """What :func:`apply_retention` would do now, changing nothing (``quiver gc --dry-run``)."""
    index = RetainedIndex()
    index.sync(catalog, None, full=True)
    view = witnessed(registry or NO_SUBSCRIBERS, unregistered)
    pl = plan(index, view, config, now_ns, wal_bytes)
    dropped: dict[str, dict[str, list[int]]] = {}
    for (pid, seq), subs in sorted(pl.drop_records.items()):
        for sub in subs:
            dropped.setdefault(sub, {}).setdefault(pid, []).append(seq)
    return RetentionResult(
        plan=pl, deleted={}, dropped=dropped, damaged=index.damaged(),
        sizes=_chosen_sizes(index, pl), unregistered=sorted(unregistered),
    )  # fmt: skip


def _count(
    metrics: m.Metrics,
    pl: RetentionPlan,
    dropped: Mapping[str, Mapping[str, list[int]]],
    index: RetainedIndex,
    wal: Mapping[str, int],
    config: RetentionConfig,
) -> None:
    """Counters of what the pass did and the bytes gauges (``index`` after its deletions)."""
    for reason, keys in (
        ("steady", pl.delete_steady),
        ("time", pl.delete_time),
        ("size", pl.delete_size + pl.drop_size),
    ):
        if keys:
            metrics.inc(m.GC_EVICTIONS, len(keys), reason=reason)
    unique = {(p, s) for sub in dropped.values() for p, seqs in sub.items() for s in seqs}
    if unique:
        metrics.inc(m.SEGMENT_DROPPED, len(unique))
    for sub, per in dropped.items():
        metrics.inc(m.SUBSCRIBER_DROPPED, sum(len(v) for v in per.values()), subscriber=sub)
    parts = sorted(set(index.partitions()) | set(wal))
    metrics.clear_gauge(m.PARTITION_BYTES)
    for p in parts:
        b = wal.get(p, 0) + index.part_bytes(p)
        metrics.set(m.PARTITION_BYTES, b, partition=p)
        if config.size_cap_bytes:
            metrics.set(
                m.PARTITION_CAP_FRACTION,
                b / (config.size_cap_bytes / max(len(parts), 1)),
                partition=p,
            )
    metrics.set(m.STORE_BYTES, pl.bytes_after)


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


def wait_for_capacity(
    check: Callable[[], bool],
    timeout_s: float,
    metrics: m.Metrics | None = None,
    *,
    poll_s: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Block until ``check()`` is true; return the seconds waited.

    Counts one ``quiver.ingest.throttle_total`` per throttled call. Raises
    :class:`~quiver_spark.errors.StoreAtCapacityError` (retryable) after
    ``timeout_s``; nothing was written in that case.
    """
    if check():
        return 0.0
    if metrics is not None:
        metrics.inc(m.INGEST_THROTTLE)
    start = clock()
    deadline = start + timeout_s
    log.warning("quiver.ingest.throttle timeout_s=%.1f", timeout_s)
    while True:
        now = clock()
        if now >= deadline:
            raise StoreAtCapacityError(
                f"store is over retention.size_cap and stayed there for {timeout_s:g}s "
                "(size_cap_policy=backpressure): no unacknowledged segment is deleted; "
                "retry after subscribers acknowledge data, or raise the cap"
            )
        sleep(min(poll_s, deadline - now))
        if check():
            return clock() - start


class AnchoredClock:
    """Wall-clock ns at construction advanced by the monotonic clock (ARCHITECTURE.md §8.7).

    Ingestion timestamps are wall-clock; comparing them with this clock keeps a wall
    clock jump after start from expiring data early. ``now_ns`` is what a store passes
    to :func:`plan`/:func:`apply_retention`.
    """

    def __init__(
        self,
        wall_ns: Callable[[], int] = time.time_ns,
        mono_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._mono = mono_ns
        self._wall0 = wall_ns()
        self._mono0 = mono_ns()

    def now_ns(self) -> int:
        return self._wall0 + (self._mono() - self._mono0)
