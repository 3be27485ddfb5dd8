"""What a subscription's acknowledgement writes (ARCHITECTURE.md §18, §19): the seqs a
position acknowledges, those past its horizon cutoff recorded ``dropped`` instead, the
outcomes in the ack log, their counts and the subscription record; and what the batches
a consumer read under cutoffs did with each seq, which decides those drops
(:mod:`.dropping`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial

from ..errors import CorruptionError, UnknownSegmentError
from ..metrics import SOURCE_ACKED, Metrics
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..subscribers import Outcome, SubscriberRegistry, records
from ..subscribers.live import LiveClaim
from .dropping import Handed, count_horizon_drops, note_handed, past_horizon
from .horizon import past
from .planning import SegmentPlanner
from .position import Position

log = logging.getLogger(__name__)

RECORD_PERIOD_S = 1.0
"""A consumer rewrites its subscription record's last-ack time at most this often."""


class Acknowledgements:
    """The acknowledgements of subscriber ``name``'s consumer: what it records in the ack
    log (as ``claim``, its live claim on an object root) and what it remembers between
    its batches and their acknowledgement."""

    def __init__(
        self,
        store: QuiverStore,
        name: str,
        registry: SubscriberRegistry,
        planner: SegmentPlanner,
        metrics: Metrics,
        claim: Callable[[], LiveClaim | None],
    ) -> None:
        self.store = store
        self.name = name
        self.registry = registry
        self.planner = planner
        self.metrics = metrics
        self._claim = claim
        self._last_touch = float("-inf")
        self.handed: dict[tuple[str, int], Handed] = {}
        """Per seq a batch with a cutoff read: whether one delivered it, and the newest
        cutoffs it was left out under (a few: :func:`note_handed`)."""

    def delivers(self, meta: SegmentMeta, cutoff_ns: int | None) -> bool:
        """Whether the batch ending at ``cutoff_ns`` delivers ``meta`` (False: past the
        horizon, left out; the ack through it records it dropped). What a batch with a
        cutoff did is remembered for that ack: a later read of the seq under another
        cutoff never overwrites it."""
        key = (meta.partition, meta.seq)
        if cutoff_ns is None and key not in self.handed:
            return True
        delivered = not past(meta.max_ingestion_ns, cutoff_ns)
        self.handed[key] = note_handed(self.handed.get(key), cutoff_ns, delivered)
        return delivered

    def record(
        self, through: Position, given_back: Callable[[], Mapping[str, set[int]]], now: float
    ) -> int:
        """Durably record ``ack`` for every seq ``through`` includes that is not done yet,
        except those nacked and not delivered again since (``given_back``), and
        ``dropped`` for those past its cutoff; ``now``: the monotonic time of the ack.
        Returns the seqs recorded."""
        self.check_assigned(through)
        held_back = given_back()
        todo: dict[str, list[int]] = {}
        for p, hi in through.segments.items():
            lo = self.registry.hwm(self.name, p) + 1
            held = held_back.get(p, ())
            seqs = [
                s
                for s in range(lo, hi + 1)
                if s not in held
                and through.covers(p, s)
                and not self.registry.is_done(self.name, p, s)
            ]
            if seqs:
                todo[p] = seqs
        n = sum(len(v) for v in todo.values())
        drops, dropped_rows = past_horizon(self.planner.meta, todo, through.cutoff_ns, self.handed)
        n_drop = sum(len(v) for v in drops.values())
        if todo:
            acks = {p: [s for s in v if s not in drops.get(p, ())] for p, v in todo.items()}
            self.registry.record_many(
                self.name, acks, Outcome.ACK, consumer=self._claim(), dropped=drops
            )
            if n - n_drop:
                self.metrics.inc(SOURCE_ACKED, n - n_drop, subscriber=self.name)
            if n_drop:
                count_horizon_drops(
                    self.metrics,
                    self.store.objects,
                    self.name,
                    partial(self.registry.done_count, self.name),
                    drops,
                    dropped_rows,
                    through.cutoff_ns,
                )
            if now - self._last_touch >= RECORD_PERIOD_S:  # its record: last acknowledged
                self._last_touch = now
                try:  # advisory: a record that cannot be updated never fails an ack
                    records.touch(
                        self.store.objects,
                        self.name,
                        progress=self.registry.done_count(self.name),
                    )
                except (OSError, CorruptionError) as e:
                    log.warning("quiver.subscriber.record_unwritten %s: %s", self.name, e)
        if self.handed:  # what it says of seqs done (these, or history read again) is spent
            done = partial(self.registry.is_done, self.name)
            self.handed = {k: v for k, v in self.handed.items() if not done(*k)}
        return n

    def check_assigned(self, through: Position) -> None:
        """Refuse a position past what a partition ever published (nothing written): an
        ack there would mark future segments done before anyone read them."""
        location = self.store.segment_location
        for p, hi in through.segments.items():
            if hi <= self.registry.hwm(self.name, p):
                continue
            top = max(self.registry.max_deleted(p), self.planner.highest_seen(p))
            if hi <= top or location.is_published(p, hi):
                continue  # seqs are gapless: every seq below a published one was too
            if hi in location.quarantined(p):
                continue
            top = max([top, *location.published_seqs(p)[-1:]])
            if hi > top:
                raise UnknownSegmentError(
                    f"cannot acknowledge partition {p!r} through segment {hi} for "
                    f"subscriber {self.name!r}: the partition has published only up to "
                    f"{top}; a position must come from this store's next_batch_end()"
                )
