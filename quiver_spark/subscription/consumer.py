"""The subscription: one named consumer of a store that plans, reads and acknowledges
(ARCHITECTURE.md §18, §19); :mod:`quiver_spark.subscription` is what callers import."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from .. import layout
from ..config import StoreConfig, validate_name
from ..dataloss import LossPolicy, LostLog, MissingSegment, PartitionEvidence, evidence
from ..errors import CorruptionError, MissingKind, QuiverError, SegmentMissingError, SubscriberError
from ..metrics import Metrics
from ..segment import SegmentLocation, SegmentMeta
from ..store import QuiverStore
from ..subscribers import Outcome, StartPosition, SubscriberRegistry, records
from ..subscribers.live import LiveClaim
from .acknowledging import Acknowledgements
from .catchup import (
    DEFAULT_HEAD_SHARE,
    CatchUpOrder,
    batch_spans,
    given_head_share,
    plan_catch_up,
    resumed_position,
)
from .horizon import cutoff, parse_horizon
from .looks import CallLooks
from .opening import open_store
from .planning import UNLIMITED, Caps, SegmentPlanner
from .position import Position

log = logging.getLogger(__name__)


RETENTION_IDLE_PERIOD_S = 5.0
"""Retention also runs this often from a consumer that acknowledged nothing new."""


@dataclass(frozen=True)
class Batch:
    """A planned batch: the segments in ``(start, end]`` that can be read."""

    start: Position
    end: Position
    segments: list[SegmentMeta]


# -- the subscription -------------------------------------------------------------------------
@dataclass
class _State:
    last_seal: float = 0.0
    last_retention: float = 0.0
    retention_failed: bool = False


class Subscription:
    """A named consumer of a store (see the module docstring).

    Parameters
    ----------
    store
        An open handle (read/maintain handles suffice); closed with the subscription
        when ``owns_store``.
    name
        The subscriber id (``[A-Za-z0-9_.-]{1,64}``).
    fail_on_data_loss
        A published segment that is gone without a retention record, quarantined or
        corrupt fails the read (True) or is skipped and counted (False).
    live
        Hold the subscriber's one-live-consumer lock while open.
    order
        ``oldest`` (default) or ``newest``: which unread segments a batch takes first
        (:mod:`quiver_spark.subscription.catchup`); ``head_share`` is the head's share of the caps
        while newest first has a backlog too (default ``DEFAULT_HEAD_SHARE``; given with
        ``oldest``, it is refused).
    horizon
        The acceptance horizon (seconds, or a duration such as ``"6h"``; None: off,
        the default): a segment whose newest row was ingested longer ago than this when
        its batch was planned is recorded ``dropped`` by the batch's :meth:`ack`
        instead of delivered (:mod:`quiver_spark.subscription.horizon`). ``clock``: the
        epoch-ns wall clock a batch's cutoff is taken from.
    """

    def __init__(
        self,
        store: QuiverStore,
        name: str,
        *,
        fail_on_data_loss: bool = True,
        live: bool = True,
        owns_store: bool = False,
        metrics: Metrics | None = None,
        order: CatchUpOrder | str = CatchUpOrder.OLDEST,
        head_share: float | None = None,
        horizon: float | str | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.order = CatchUpOrder.parse(order)
        share = given_head_share(self.order, head_share)
        self.head_share = DEFAULT_HEAD_SHARE if share is None else share
        self.horizon_s = parse_horizon(horizon, "horizon")
        self.clock = clock
        self.name = validate_name("subscriber", name)
        self.metrics = metrics if metrics is not None else store.metrics
        self.loss = LossPolicy(
            store.root,
            self.name,
            lost=store.kind.lost_log(store.root, self.name, store.objects, store.io),
            journal=store.kind.journal,
            objects=store.objects,
            fail_on_data_loss=fail_on_data_loss,
            metrics=self.metrics,
        )
        self._owns_store = owns_store
        self._live = live
        self._state = _State()
        self._registered = False  # seen registered (a live consumer is never expired)
        self._given_back: dict[str, set[int]] | None = None  # nacked, not delivered since
        if live:
            # on an object root the lease's epoch starts above the standing claim's, so
            # a lease object gone missing never leaves the subscriber unclaimable
            store.kind.live.claim(
                name,
                self,
                ttl_s=store.config.lease_ttl_s,
                floor=lambda: store.subscribers.claim_epoch(name),
            )
        try:
            self.registry: SubscriberRegistry = store.subscribers
            self._looks = CallLooks(store, self.registry)
            self._claim_consumer()  # before any position is read (§13.7)
        except BaseException:
            if live:
                store.kind.live.release(name, self)
            raise
        self.planner = SegmentPlanner(
            store,
            self.registry,
            refresh=self._looks.refresh,
            partitions=self._looks.partitions,
            look=self._looks.look,
        )
        self._acks = Acknowledgements(
            store, self.name, self.registry, self.planner, self.metrics, self._live_claim
        )

    def _live_claim(self) -> LiveClaim | None:
        """This consumer's claim on an object root (None: POSIX, or not live)."""
        return self.store.kind.live.claim_of(self.name, self) if self._live else None

    def _claim_consumer(self) -> None:
        """Object root: record in the ack log that this consumer is the subscriber's
        live one, so an earlier consumer paused past its lease can no longer
        acknowledge (its late acknowledgement is refused by the log's order, §13.7)."""
        claim = self._live_claim()
        if claim is not None:
            self.registry.claim_consumer(self.name, claim)

    @classmethod
    def open(
        cls,
        path: str,
        name: str,
        *,
        config: StoreConfig | None = None,
        fail_on_data_loss: bool = True,
        live: bool = True,
        storage_options: dict[str, str] | None = None,
        order: CatchUpOrder | str = CatchUpOrder.OLDEST,
        head_share: float | None = None,
        horizon: float | str | None = None,
    ) -> Subscription:
        """Open subscriber ``name`` on the store at ``path`` (registered by :meth:`start`;
        ``storage_options``: an object root's client settings; ``order``, ``head_share``:
        the catch-up order)."""
        store = open_store(path, config, storage_options)
        try:
            return cls(
                store,
                name,
                fail_on_data_loss=fail_on_data_loss,
                live=live,
                owns_store=True,
                order=order,
                head_share=head_share,
                horizon=horizon,
            )
        except BaseException:
            store.close()
            raise

    def one_call(self) -> AbstractContextManager[None]:
        """Within the block (and within every public call, which opens one), the ack log
        is caught up and the partitions are listed at most once (:mod:`.looks`)."""
        return self._looks.one_call()

    # -- facts ------------------------------------------------------------------------------
    @property
    def location(self) -> SegmentLocation:
        return self.store.segment_location

    @property
    def fail_on_data_loss(self) -> bool:
        return self.loss.fail_on_data_loss

    @property
    def lost(self) -> LostLog:
        """The segments this subscriber skipped or failed on (``readers/<name>.lost.jsonl``)."""
        return self.loss.lost

    def registered(self) -> bool:
        self._looks.refresh()
        self._registered = self.name in self.registry.subscribers()
        return self._registered

    def _require_registered(self, *, new_ok: bool) -> None:
        """Refuse to go on for a subscriber the store expired (its tombstone record) and,
        unless ``new_ok`` (planning, which a new subscriber may do before ``start``),
        for one that is not registered: a consumer resuming from a position of its own
        (a Spark checkpoint) meets this at its first call, before any row is served."""
        if self._registered or self.registered():
            return
        records.refuse_if_expired(self.store.objects, self.store.root, self.name)
        if not new_ok:
            root = self.store.root
            raise SubscriberError(
                f"subscriber {self.name!r} is not registered in the store at {root} "
                "(removed, or never started); to start it from the retained data: "
                f"quiver subscribers {root} add {self.name}, or Subscription.start()"
            )

    def evidence(self, partition: str) -> PartitionEvidence:
        return evidence(self.location, self.registry, partition)

    def meta(self, partition: str, seq: int) -> SegmentMeta | None:
        """Cached metadata (:meth:`SegmentPlanner.meta`); None when it fails verification.

        Raises SegmentMissingError when the segment is not published (any more).
        """
        return self.planner.meta(partition, seq)

    def seal_idle(self, *, force: bool = False) -> None:
        """Seal committed data of partitions whose writer is gone (rate limited), so
        rows committed while a writer sits idle or after it died become readable."""
        period = min(5.0, max(0.05, self.store.config.segment.max_open_duration_s / 2))
        now = time.monotonic()
        if not force and now - self._state.last_seal < period:
            return
        self._state.last_seal = now
        sealed = self.store.finalize_idle_partitions()
        if sealed:
            log.info("quiver.source.finalize_idle sealed=%s", sealed)

    def top(self) -> Position:
        """The highest seq published or quarantined per partition (what exists now)."""
        return self.planner.top()

    # -- positions ------------------------------------------------------------------------------
    def acked(self) -> Position:
        """Per partition, the highest seq through which everything is acknowledged."""
        with self.one_call():
            self._require_registered(new_ok=False)
            self._looks.refresh()
            return Position(
                {
                    p: h
                    for p in self._looks.partitions()
                    if (h := self.registry.hwm(self.name, p)) > 0
                }
            )

    def _resumed(self) -> Position:
        """Where this subscriber reading newest first is, from the ack log: its mark,
        and the run of acknowledged seqs above it as the head (:func:`resumed_position`)."""
        self._require_registered(new_ok=False)
        self._looks.refresh()
        return resumed_position(
            partial(self.registry.hwm, self.name),
            partial(self.registry.gaps, self.name),
            self._looks.partitions(),
        )

    def start(
        self, position: StartPosition | str | None = None, *, since_ns: int | None = None
    ) -> Position:
        """Register the subscriber if new and return where a consumer without a
        position of its own starts: ``acked`` (default for a known subscriber),
        ``earliest`` (default for a new one: the first retained or lost segment) or
        ``latest`` (after everything published now). ``since_ns`` instead starts at the
        first segment holding a row ingested at or after that time (epoch ns), so no
        such row is missed (rows of that segment ingested before it come along).
        ``position`` may be named as the ``startingPosition`` option is."""
        wanted = None if position is None else StartPosition.parse(position)
        self.seal_idle(force=True)
        # A seq published once but now lost (quarantined, vanished) counts as retained:
        # an earliest start plans it, so its loss is reported (§17), never skipped.
        found = {p: self.evidence(p) for p in self.store.partitions()}
        retained = {
            p: sorted(ev.published | {m.seq for m in ev.losses()}) for p, ev in found.items()
        }
        by_time = (
            {p: self._first_since(p, seqs, since_ns) - 1 for p, seqs in retained.items()}
            if since_ns is not None
            else None
        )
        # the tombstone check and the registration under the ack log's lock, which the
        # expiry pass holds too: never a silent restart of an expired subscriber. On an
        # object root nothing locks between processes: the record is read after the
        # live lease is taken (in __init__), and a pass writes the tombstone before it
        # looks for that lease, so a start sees the tombstone of a deregistration under
        # way (refused) or the pass sees it live (no expiry)
        with self.registry.exclusive():
            known = self.name in self.registry.subscribers()
            if not known or records.tombstoned(self.store.objects, self.name):
                records.refuse_if_expired(self.store.objects, self.store.root, self.name)
            start = wanted or (StartPosition.ACKED if known else StartPosition.EARLIEST)
            self.registry.register(
                self.name,
                start=by_time if by_time is not None else start,
                retained=retained,
                exist_ok=True,
            )
            self._registered = True
            self._claim_consumer()
            if not known:
                try:
                    records.create_record(
                        self.store.objects,
                        self.name,
                        progress=self.registry.done_count(self.name),
                    )
                except OSError as e:  # advisory: the ack log holds the registration
                    log.warning("quiver.subscriber.record_unwritten %s: %s", self.name, e)
        marks: dict[str, int] = {}
        for p, seqs in retained.items():
            hwm = self.registry.hwm(self.name, p)
            if by_time is not None:
                marks[p] = by_time[p]
            elif start is StartPosition.ACKED or not seqs:
                marks[p] = hwm
            elif start is StartPosition.EARLIEST:
                marks[p] = found[p].first_unread() - 1
            else:
                marks[p] = found[p].highest
        log.info(
            "quiver.source.start subscriber=%s position=%s known=%s offset=%s",
            self.name,
            start.value,
            known,
            marks,
        )
        return Position(marks)

    def _first_since(self, partition: str, seqs: Sequence[int], since_ns: int) -> int:
        """The first of ``seqs`` that may hold a row ingested at or after ``since_ns``
        (one whose metadata cannot tell counts: its loss must be reported)."""
        for seq in seqs:
            try:
                meta = self.meta(partition, seq)
            except SegmentMissingError:
                return seq  # lost since the listing: planning reports it
            if meta is None or meta.max_ingestion_ns >= since_ns:
                return seq
        return (seqs[-1] + 1) if seqs else 1

    def next_batch_end(
        self, after: Position, caps: Caps = UNLIMITED, until: Position | None = None
    ) -> Position:
        """The end of the next batch after ``after``: segments admitted oldest first
        (by ingestion time, across partitions) under ``caps``, never past ``until``;
        at least one segment when any is available (:meth:`SegmentPlanner.plan`).
        With a horizon the end carries the batch's cutoff, taken now (an end that
        adds nothing is ``after`` itself)."""
        with self.one_call():
            self._require_registered(new_ok=True)
            self.seal_idle()
            return self._stamped(after, self._plan(after, caps, until))

    def _stamped(self, after: Position, end: Position) -> Position:
        """``end`` with this batch's cutoff (:mod:`quiver_spark.subscription.horizon`),
        decided here, once: it travels in the position, so a replay of the batch decides the same.
        A plan that moves nothing returns ``after`` unchanged (a query sees no new
        batch because the clock moved, nor because ``after`` holds the cutoff of a
        horizon this consumer no longer has)."""
        if end.segments == after.segments and end.backlog == after.backlog:
            return after
        if self.horizon_s is None:
            return end
        return dataclasses.replace(end, cutoff_ns=cutoff(self.clock(), self.horizon_s))

    def _plan(
        self,
        after: Position,
        caps: Caps,
        until: Position | None = None,
        skip: Callable[[str, int], bool] | None = None,
    ) -> Position:
        """Oldest first, or with the two cursors of :mod:`quiver_spark.subscription.catchup` (newest
        first, or a position that holds a backlog)."""
        newest = self.order is CatchUpOrder.NEWEST
        if not newest and not after.backlog:
            return self.planner.plan(after, caps, until)
        return plan_catch_up(
            self.planner, after, caps, until, newest=newest, head_share=self.head_share, skip=skip
        )

    @property
    def latest(self) -> Position | None:
        """Everything available at the last :meth:`next_batch_end` (for lag reporting)."""
        return self.planner.latest

    def segments(
        self, start: Position, end: Position, *, pending_only: bool = False
    ) -> list[SegmentMeta]:
        """The readable segments in ``(start, end]``, each missing one settled by the
        data-loss policy (:meth:`LossPolicy.settle`): a pure function of the positions but
        for segments that are no longer there. ``pending_only`` passes over the seqs
        this subscriber already acknowledged (above its mark, beside a nacked one).
        A segment past ``end``'s horizon cutoff is left out: :meth:`ack` of ``end``
        records it dropped.

        Nacked seqs in the range count as delivered again from here on: a later
        :meth:`ack` through them acknowledges them."""
        self._require_registered(new_ok=True)
        given_back = self._nacked() if self._registered else {}
        out: list[SegmentMeta] = []
        refreshed = False
        spans = batch_spans(start, end)
        found_ev: dict[str, PartitionEvidence] = {}
        for p, lo, hi in spans:
            ev: PartitionEvidence | None = found_ev.get(p)
            for seq in range(lo, hi + 1):
                if pending_only and self.registry.is_done(self.name, p, seq):
                    continue
                try:
                    meta = self.meta(p, seq)
                except SegmentMissingError:
                    if not refreshed:
                        self.registry.refresh()
                        refreshed = True
                    ev = ev or found_ev.setdefault(p, self.evidence(p))
                    if ev.is_void(seq):
                        continue  # never published (object root, §11.3): nothing lost
                    found = ev.classify(seq)
                    if found is None:  # published since our first look
                        try:
                            meta = self.meta(p, seq)
                        except SegmentMissingError:
                            found = MissingSegment(p, seq, MissingKind.MISSING)
                    if found is not None:
                        self.loss.settle(found)
                        continue
                if meta is None:
                    error = self.planner.meta_errors[(p, seq)]
                    self.loss.settle(MissingSegment.corrupt(p, seq, error))
                    continue
                if self._acks.delivers(meta, end.cutoff_ns):
                    out.append(meta)  # else past the horizon: an ack through end drops it
        for p, lo, hi in spans:
            if given_back.get(p):
                given_back[p] = {s for s in given_back[p] if not lo <= s <= hi}
        return out

    def _nacked(self) -> dict[str, set[int]]:
        """Per partition, the seqs nacked and not delivered again since (loaded from the
        ack log once: a nack outlives the process that made it)."""
        if self._given_back is None:
            self._looks.refresh()
            self._given_back = {
                p: set(seqs)
                for p in self._looks.partitions()
                if (seqs := self.registry.nacked(self.name, p))
            }
        return self._given_back

    def poll(self, caps: Caps = UNLIMITED) -> Batch | None:
        """The next batch after what is acknowledged (registering the subscriber on
        first use), or None when nothing new is available."""
        with self.one_call():
            if not self.registered():
                self.start()
            if self.order is CatchUpOrder.NEWEST:
                begin = self._resumed()
                self.seal_idle()
                end = self._stamped(
                    begin, self._plan(begin, caps, skip=partial(self.registry.is_done, self.name))
                )
            else:
                begin = self.acked()
                end = self.next_batch_end(begin, caps)
            if not end.is_after(begin):
                return None
            return Batch(begin, end, self.segments(begin, end, pending_only=True))

    def read(self, meta: SegmentMeta, *, verify: bool = True) -> Iterator[pa.RecordBatch]:
        """The rows of one planned segment, verified (size and CRC-32C) before the
        first batch; a segment gone since planning is settled by the data-loss policy."""
        reader = self.loss.open(self.location, meta, verify=verify)
        if reader is None:
            return
        with reader:
            yield from reader.batches()

    # -- acknowledgement ------------------------------------------------------------------------
    def ack(self, through: Position) -> int:
        """Durably acknowledge every seq up to ``through`` (idempotent, replay-safe:
        seqs already done are not recorded again), then run the store's retention pass
        (rate limited when nothing new was acknowledged). Returns the seqs acknowledged.

        Seqs that were never readable (dropped, lost and skipped) are acknowledged too,
        so the subscriber's mark moves past them. A seq nacked and not delivered again
        since (by :meth:`poll` or :meth:`segments`) is passed over: it stays pending.
        With a horizon cutoff in ``through``, the seqs :meth:`segments` left out as past
        it are recorded ``dropped`` in the same write (counted, and noted in the
        subscription record); they count in the return value.
        """
        with self.one_call():
            return self._ack(through)

    def _ack(self, through: Position) -> int:
        self._require_registered(new_ok=False)
        if self._live:  # a consumer whose lease was taken over must not acknowledge
            self.store.kind.live.check(self.name, self)
        self._looks.refresh()
        st = self._state
        now = time.monotonic()
        n = self._acks.record(through, self._nacked, now)
        deleted = 0
        if n or st.retention_failed or now - st.last_retention >= RETENTION_IDLE_PERIOD_S:
            st.last_retention = now
            deleted = self._retention_after_ack()
        if n or deleted:
            self._publish_metrics()
        self.planner.forget(through)
        if n or deleted:
            log.info(
                "quiver.source.commit subscriber=%s end=%s acked=%d deleted=%d",
                self.name,
                through.segments,
                n,
                deleted,
            )
        return n

    def _retention_after_ack(self) -> int:
        """The pass after an acknowledgement that is already durable: a failure is kept
        (the store's ``maintenance_error``), logged and retried by the next ack, never
        raised (the caller would take a durable ack for a failed one). Returns the
        segments deleted."""
        try:
            result = self.store.run_retention()
        except (OSError, QuiverError) as e:
            self._state.retention_failed = True
            self.store.maintenance_error = e
            log.error("quiver.retention.deferred subscriber=%s: %s", self.name, e)
            return 0
        self._state.retention_failed = False
        return sum(len(v) for v in result.deleted.values())

    def _publish_metrics(self) -> None:
        try:  # advisory: a metrics file that cannot be written never fails a commit
            self.store.publish_process_metrics(layout.consumer_metrics_instance(self.name))
        except OSError as e:
            log.warning("quiver.metrics.unwritten subscriber=%s error=%s", self.name, e)

    def nack(self, partition: str, seqs: Sequence[int]) -> None:
        """Mark ``seqs`` as not processed: they stay pending, a later :meth:`ack` through
        them passes over them, and they are delivered again (``poll`` plans from the
        acknowledged mark, so it delivers them first). Durable before it returns."""
        self._require_registered(new_ok=False)
        seqs = list(seqs)
        self.registry.record(self.name, partition, seqs, Outcome.NACK, consumer=self._live_claim())
        pending = [s for s in seqs if not self.registry.is_done(self.name, partition, s)]
        if pending:  # recorded: only now part of what this consumer holds back
            self._nacked().setdefault(partition, set()).update(pending)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        if self._live:  # expiry counts from when it was last live (ARCHITECTURE.md §13.8)
            try:
                done = (
                    self.registry.done_count(self.name)
                    if self.name in self.registry.subscribers()
                    else None
                )
                records.note_live(self.store.objects, self.name, progress=done)
            except (OSError, CorruptionError) as e:  # advisory: never fails a close
                log.warning("quiver.subscriber.record_unwritten %s: %s", self.name, e)
        try:
            if self._owns_store:
                self.store.close()
        finally:
            if self._live:
                self.store.kind.live.release(self.name, self)
                self._live = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
