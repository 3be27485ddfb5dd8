"""Subscriber expiry under ``subscriber.expire_after`` and the records it reads (§13.8).

A retention pass deregisters a subscriber neither live nor acknowledging for longer
than the store's ``subscriber.expire_after``, leaving its record as a tombstone
first; idleness counts from the later of its last acknowledgement and the last time a
consumer held it live. :class:`SubscriberExpiry` keeps, for one store handle, the
live notes a pass could not write, so a failed write never makes a subscriber look
idle for longer than it was.

Idleness is measured on the storage's clock alone (:mod:`.objects.clock`): from the
storage's modification time of the record's last activity write to the storage's
"now" (the modification time of a probe this handle writes), never from the wall
times in the record, which other machines wrote by their own clocks. So a pass whose
clock is hours ahead, or a consumer whose clock is hours behind, never expires a
subscriber early; every pass in every process (a writer's maintenance, a consumer's
acknowledgement, a one-off ``quiver gc``) judges alike.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from .errors import CorruptionError
from .objects import ObjectStore
from .objects.clock import RESOLUTION_NS, StorageClock
from .seams import RetentionLedger
from .subscribers import SubscriberRegistry, records
from .subscribers.live import LiveLocks

log = logging.getLogger(__name__)

LIVE_NOTE_PERIOD_NS = 60 * 10**9
"""A live subscriber's record notes it live at most this often (storage's clock)."""

TOMBSTONE_SETTLED_NS = 600 * 10**9
"""A tombstone on a subscriber still registered and active is taken back by a pass
once this old (storage's clock): no pass takes longer between its tombstone and its
deregistration."""


@dataclasses.dataclass(frozen=True)
class _Seen:
    """A live note a pass could not write: when, by this process's wall clock (what
    the record will show) and by the storage's (what expiry counts from)."""

    wall_ns: int
    stored_ns: int


class SubscriberExpiry:
    """Expiry decisions of one store handle, with the live notes it could not write."""

    def __init__(self, root: str, objects: ObjectStore, live: LiveLocks) -> None:
        self.root = root
        self.objects = objects
        self.live = live
        """The root's live-consumer locks, as its kind builds them."""
        self.clock = StorageClock(objects, records.CLOCK_KEY)
        """The storage's clock, by which idleness is measured (§13.8)."""
        # live notes a pass could not write: expiry counts from them and the next pass
        # writes them (ARCHITECTURE.md §13.8)
        self._unwritten_live: dict[str, _Seen] = {}

    def expire_idle(self, reg: SubscriberRegistry, after: float | None, now_ns: int) -> list[str]:
        """Deregister subscribers idle past ``subscriber.expire_after`` (store policy),
        leaving a record that says so (§13.8); a live consumer is never expired, and
        idleness counts from the later of the last acknowledgement and the last time a
        consumer held the subscriber live (noted here, and by the consumer as it stops),
        measured on the storage's clock (:attr:`clock`). ``now_ns`` (this process's
        wall clock) is only what the times written into records show.

        Never on a record that may be stale: one whose ``progress`` differs from the
        ack log's done count missed acknowledgements (its writes failed), so the pass
        rewrites it as active now instead; a live note this handle could not write
        counts as written. A pass that cannot read the storage's clock expires
        nothing."""
        if after is None:
            return []
        names = reg.subscribers()
        if not names:
            return []
        try:
            stored_now = self.clock.now_ns()
        except OSError as e:  # no interval can be measured: nothing is expired
            log.warning("quiver.subscriber.expiry_skipped: the storage's clock: %s", e)
            return []
        idle_ns = int(after * 1e9) + RESOLUTION_NS
        decided: list[int] = []  # the fresh reading of the storage's clock, once a pass

        def fresh() -> int:
            if not decided:
                decided.append(self.clock.now_ns(fresh=True))
            return decided[0]

        expired = []
        # Under the ack log's exclusive lock for the whole decision on a POSIX root: a
        # consumer's start takes the same lock to check for a tombstone and register.
        # An object root has no lock between processes: the deregistration is one
        # transaction that checks again that the subscriber is idle (see _expire).
        with reg.exclusive():
            recs = records.list_records(self.objects)
            names = reg.subscribers()
            for gone in set(self._unwritten_live) - set(names):
                del self._unwritten_live[gone]
            for name in names:
                rec = recs.get(name)
                done = reg.done_count(name)
                if rec is None:  # registered before records existed: its clock starts now
                    records.create_record(self.objects, name, now_ns, progress=done)
                    continue
                active = rec.activity_stored_ns
                if self.live.is_live(name):
                    # idleness counts from when it was last live too (§13.8)
                    if active is None or stored_now - active >= LIVE_NOTE_PERIOD_NS:
                        self._note_live(name, _Seen(now_ns, stored_now), done)
                    self._untombstone_stale(name, rec, stored_now)
                    continue
                unwritten = self._unwritten_live.get(name)
                if unwritten is not None:  # seen live by a pass that could not say so
                    self._note_live(name, unwritten, None)
                if active is None:  # the storage tells no time for it: never expired
                    continue
                last_active = max(active, unwritten.stored_ns if unwritten else 0)
                if stored_now - last_active < idle_ns:
                    self._untombstone_stale(name, rec, stored_now)
                    continue
                if rec.missed_progress(done):
                    # acknowledged since the record was written (or a record from before
                    # `progress`): active now, never expired on times it did not get
                    log.warning(
                        "quiver.subscriber.record_behind subscriber=%s progress=%s done=%d: "
                        "the ack log shows progress its record missed; counted active now",
                        name,
                        rec.progress,
                        done,
                    )
                    try:
                        records.write_record(
                            self.objects, rec.active(progress=done, progress_ns=now_ns)
                        )
                    except OSError as e:  # kept: this pass's evidence counts until written
                        log.warning("quiver.subscriber.record_unwritten %s: %s", name, e)
                        self._unwritten_live[name] = _Seen(now_ns, stored_now)
                    continue
                since = unwritten.stored_ns if unwritten else 0
                if not self._expire(reg, name, done, after, now_ns, fresh(), since):
                    continue
                self._unwritten_live.pop(name, None)
                log.warning(
                    "quiver.subscriber.expired subscriber=%s idle_s=%.0f expire_after_s=%.0f",
                    name,
                    (fresh() - last_active) / 1e9,
                    after,
                )
                expired.append(name)
        return expired

    def _expire(
        self,
        reg: SubscriberRegistry,
        name: str,
        done: int,
        after: float,
        now_ns: int,
        stored_now: int,
        unwritten: int,
    ) -> bool:
        """Deregister ``name``, found idle with ``done`` done, leaving its tombstone
        first (a crash between the two leaves a registered subscriber whose record says
        expired: a start is refused and the next pass completes it). The tombstone is
        written only on a record still idle by the storage's clock at ``stored_now`` (a
        fresh reading: the record is read after it, so a write since makes it active);
        the deregistration is one transaction
        (:meth:`SubscriberRegistry.deregister_idle`) whose build checks, on the newest
        ack log, the done count, that the tombstone is still ours and (on an object
        root) that no consumer holds the subscriber's lease. A start reads the record
        after taking its lease, so it sees the tombstone or the pass sees its lease; an
        acknowledgement changes the done count. When the check fails the tombstone is
        taken back."""
        idle_ns = int(after * 1e9) + RESOLUTION_NS

        def idle(rec: records.SubscriptionRecord | None) -> bool:
            active = None if rec is None else rec.activity_stored_ns
            return (
                rec is not None
                and active is not None
                and stored_now - max(active, unwritten) >= idle_ns
                and not rec.missed_progress(done)
            )

        def tombstone(
            rec: records.SubscriptionRecord | None,
        ) -> records.SubscriptionRecord | None:
            if rec is None or not idle(rec):
                return None  # active since it was decided: nothing written
            return rec.quietly(
                expired_ns=now_ns, expired_after_s=after, expired_stored_ns=stored_now
            )

        if records.update_record(self.objects, name, tombstone) is None:
            return False

        def still_idle() -> bool:
            rec = records.read_record_or_none(self.objects, name)
            return (
                reg.done_count(name) == done
                and rec is not None
                and rec.expired_ns == now_ns
                # on a POSIX root the ack log's lock, held since the decision, keeps a
                # start out; on an object root a lease taken since is looked for here
                and not self.live.started_past_the_log(name)
            )

        if reg.deregister_idle(name, still_idle):
            # another pass that stopped short may have taken a tombstone back meanwhile
            records.update_record(
                self.objects, name, partial(_tombstoned, now_ns, after, stored_now)
            )
            return True
        if name in reg.subscribers():  # active again: the tombstone goes (if still ours)
            log.info("quiver.subscriber.expiry_abandoned subscriber=%s: active again", name)
            self._untombstone(name, lambda rec: rec.expired_ns == now_ns)
        return False

    def _untombstone_stale(
        self, name: str, rec: records.SubscriptionRecord, stored_now: int
    ) -> None:
        """A registered subscriber that is live or active and whose record still says
        expired: a pass stopped between its tombstone and its deregistration (it died,
        or could not take it back). Taken back once older, by the storage's clock, than
        any pass takes between the two, so a pass still at work is never disturbed (a
        tombstone from before ``expired_stored_ns`` is dated by the record's last
        write, which is no earlier than it)."""
        if rec.expired_ns is None:
            return
        written = rec.expired_stored_ns if rec.expired_stored_ns is not None else rec.stored_ns
        if written is not None and stored_now - written >= TOMBSTONE_SETTLED_NS:
            self._untombstone(name, lambda cur: cur.expired_ns == rec.expired_ns)

    def _untombstone(self, name: str, whose: Callable[[records.SubscriptionRecord], bool]) -> None:
        """Take back the tombstone of a subscriber still registered and active when
        ``whose(record)``; a failure is logged (the next pass finds it and tries again)."""

        def back(rec: records.SubscriptionRecord | None) -> records.SubscriptionRecord | None:
            if rec is None or rec.expired_ns is None or not whose(rec):
                return None
            return rec.quietly(expired_ns=None, expired_after_s=None, expired_stored_ns=None)

        try:
            records.update_record(self.objects, name, back)
        except OSError as e:
            log.warning("quiver.subscriber.record_unwritten %s: %s", name, e)

    def _note_live(self, name: str, seen: _Seen, done: int | None) -> None:
        """Write that ``name`` was live when ``seen``; a failure is kept in memory
        (expiry counts from it) and written by a later pass."""
        try:
            records.note_live(self.objects, name, seen.wall_ns, progress=done)
        except (OSError, CorruptionError) as e:  # advisory; the next pass notes it again
            log.warning("quiver.subscriber.record_unwritten %s: %s", name, e)
            kept = self._unwritten_live.get(name)
            if kept is None or kept.stored_ns < seen.stored_ns:
                self._unwritten_live[name] = seen
            return
        kept = self._unwritten_live.get(name)
        if kept is not None and kept.stored_ns <= seen.stored_ns:
            self._unwritten_live.pop(name, None)

    def note_drops(
        self, reg: RetentionLedger, before: dict[str, int], dropped: dict[str, Any]
    ) -> None:
        """After a pass dropped data for subscribers (time window, ``drop_oldest``):
        their done counts grew without any acknowledgement, so a record that was
        current before the drop is brought to the new count (§13.8), carrying the
        storage time of its last activity over (a drop is not activity). One that
        cannot be written makes the next idle check restart its clock: never an early
        expiry."""
        for name in sorted(dropped):
            if name not in before:
                continue
            try:  # conditional: an acknowledgement written meanwhile is kept
                records.update_record(
                    self.objects, name, partial(_after_drop, before[name], reg.done_count(name))
                )
            except OSError as e:
                log.warning("quiver.subscriber.record_unwritten %s: %s", name, e)


def _tombstoned(
    now_ns: int, after: float, stored_now: int, rec: records.SubscriptionRecord | None
) -> records.SubscriptionRecord | None:
    """The record of a subscriber just deregistered by expiry, saying so (None: it
    already does, or it was removed)."""
    if rec is None or rec.expired_ns is not None:
        return None
    return rec.quietly(expired_ns=now_ns, expired_after_s=after, expired_stored_ns=stored_now)


def _after_drop(
    was: int, done: int, rec: records.SubscriptionRecord | None
) -> records.SubscriptionRecord | None:
    """A record current at ``was`` brought to ``done`` after a drop; None: left alone."""
    if rec is None or rec.expired_ns is not None:
        return None
    if rec.progress != was:  # already behind: the next idle check sees it
        return None
    return rec.quietly(progress=done)
