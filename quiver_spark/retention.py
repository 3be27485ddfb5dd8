"""A retention pass: carry out the plan under the ack log's exclusive lock.

:func:`apply_retention` brings the retained-segment index up to date, asks
:func:`~quiver_spark.retention_plan.decide_retention` what to delete, makes the
``dropped`` + ``deleted`` records durable first, then deletes the segments (ARCHITECTURE.md
§15.1); :func:`preview_retention` is the same decision with nothing changed
(``quiver gc --dry-run``). :class:`AnchoredClock` is the clock a store's passes read.

A segment whose ``.meta`` fails verification (damaged) is never deleted nor recorded
deleted or dropped by a pass: it stays where it is, named in the result, the log and
the ``quiver.segment.damaged`` gauge, until ``quiver fsck --quarantine`` moves it
aside; its ``.arrow`` bytes still count toward the size cap. Every other segment is
reclaimed as usual.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from . import metrics as m
from .config import RetentionConfig
from .retained import RetainedIndex
from .retention_plan import NO_SUBSCRIBERS, Key, RetentionPlan, decide_retention, witnessed
from .seams import (
    DamagedInfo,
    DeletedMarks,
    LockedLedger,
    RetentionLedger,
    RetentionView,
    SegmentCatalog,
)

log = logging.getLogger(__name__)

SEGMENT_DAMAGED = m.SEGMENT_DAMAGED  # {partition}: segments whose .meta fails verification


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


@runtime_checkable
class CheckedCatalog(Protocol):
    """A catalog that checks the segments a pass chose before they are recorded and
    deleted (``SegmentLocation``)."""

    def check_before_delete(
        self,
        deletions: Mapping[str, Iterable[int]],
        *,
        recorded: Callable[[str], DeletedMarks] | None = None,
    ) -> tuple[Mapping[str, Sequence[int]], Sequence[DamagedInfo]]: ...


@runtime_checkable
class RefreshedLedger(Protocol):
    """An ack log that can read what other processes appended (``SubscriberRegistry``)."""

    def refresh(self) -> None: ...


def recorded_deleted(reg: RetentionLedger) -> Callable[[str], DeletedMarks]:
    """``reg``'s deleted marks of a partition, read afresh once (the first call): what
    another process's pass recorded deleted since this pass read the ack log. On an
    object root that is one LIST (and a GET per new delta); on a POSIX root the pass
    holds the ack log's exclusive lock, so nobody appended and the nested refresh reads
    nothing and takes no lock."""
    fresh = False

    def marks(partition: str) -> DeletedMarks:
        nonlocal fresh
        if not fresh and isinstance(reg, RefreshedLedger):
            reg.refresh()
        fresh = True
        return reg.deleted_marks(partition)

    return marks


@runtime_checkable
class PreparedCatalog(Protocol):
    """A catalog with something to do before segments are recorded deleted (an object
    root's ``SegmentLocation``: leftover staged objects, the GONE copy, §15.4, §10.2)."""

    def prepare_removal(self, partition: str, seqs: Sequence[int]) -> Sequence[int]: ...

    def record_removal(self, partition: str, seqs: Sequence[int]) -> None: ...


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
    listing: bool = False,
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

    ``listing`` makes the index's update a listing of every partition (``quiver gc
    --full``: the safety net for files removed by hand, §11.1).

    ``unregistered(reg)`` (read under the lock) names subscribers that have a record
    but no registration in the ack log: everything not recorded deleted is kept for
    them (§13.8), and they are listed in the result.

    ``on_dropped(reg, before, dropped)`` is called under the lock after a deletion
    that dropped data for subscribers, with each subscriber's done count
    (``reg.done_count``) from before it.
    """
    index = RetainedIndex() if index is None else index
    lost: list[str] = []
    try:
        with registry.exclusive() as reg:
            index.sync(catalog, reg, listing=listing)
            lost = sorted(unregistered(reg)) if unregistered is not None else []
            view = witnessed(reg, lost)

            held: set[Key] = set()

            def decide() -> RetentionPlan:
                return decide_retention(
                    index,
                    view,
                    config,
                    now_ns,
                    wal_bytes,
                    per_partition_cap=per_partition_cap,
                    n_partitions=n_partitions,
                    held=held,
                )

            pl = decide()
            if (pl.delete_time or pl.drop_size) and not index.surveyed:
                index.sync(catalog, reg, full=True)
                pl = decide()
            deletions = pl.deletions()
            checked: set[Key] = set()
            prepared: set[Key] = set()
            while deletions:
                # every plan is checked and prepared before anything is recorded: the
                # view may come from a manifest (what was removed by hand is forgotten, a
                # damaged .meta kept), and what must go first may not (those segments are
                # held this pass); either way the plan is made again
                fresh = {
                    p: [q for q in seqs if (p, q) not in checked] for p, seqs in deletions.items()
                }
                fresh = {p: v for p, v in fresh.items() if v}
                if fresh and isinstance(catalog, CheckedCatalog):
                    gone, bad = catalog.check_before_delete(fresh, recorded=recorded_deleted(reg))
                    checked.update((p, q) for p, seqs in fresh.items() for q in seqs)
                    if gone or bad:
                        index.remove(gone)
                        index.mark_damaged(bad)
                        pl = decide()
                        deletions = pl.deletions()
                        continue
                todo = {
                    p: [q for q in seqs if (p, q) not in prepared] for p, seqs in deletions.items()
                }
                todo = {p: v for p, v in todo.items() if v}
                stuck: set[Key] = set()
                if todo and isinstance(catalog, PreparedCatalog):
                    for p, seqs in todo.items():
                        kept = set(catalog.prepare_removal(p, seqs))
                        stuck.update((p, q) for q in kept)
                        prepared.update((p, q) for q in seqs if q not in kept)
                if not stuck:
                    break
                held |= stuck
                pl = decide()
                deletions = pl.deletions()
            sizes = _chosen_sizes(index, pl)
            if deletions and isinstance(catalog, PreparedCatalog):
                # the plan's last word: each partition's removal is kept in its GONE
                # before anything is recorded; where that fails, its segments stay
                for p, seqs in list(deletions.items()):
                    try:
                        catalog.record_removal(p, seqs)
                    except OSError as e:
                        log.warning(
                            "quiver.gc.held partition=%s seqs=%s: its GONE cannot be "
                            "written (%s); kept until it can",
                            p,
                            seqs,
                            e,
                        )
                        pl.hold([(p, q) for q in seqs], sizes)
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


def preview_retention(
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
    pl = decide_retention(index, view, config, now_ns, wal_bytes)
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


class AnchoredClock:
    """Wall-clock ns at construction advanced by the monotonic clock (ARCHITECTURE.md §15.1).

    Ingestion timestamps are wall-clock; comparing them with this clock keeps a wall
    clock jump after start from expiring data early. ``now_ns`` is what a store passes
    to :func:`apply_retention`.
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
