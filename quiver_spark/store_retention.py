"""A store handle's retention passes (ARCHITECTURE.md §15.1) and the metrics each one
publishes (§20).

:meth:`QuiverStore.run_retention` is the one entry point every pass goes through (a
writer's maintenance, a subscription's acknowledgement, ``quiver gc``); it runs
:meth:`StoreRetention.run`: the store's recorded policy read again (§7.2), idle
subscribers expired (§13.8), the plan carried out
(:func:`~quiver_spark.retention.apply_retention`), admission under the size cap settled
(§15.2) and the metrics published. What one handle's passes keep between them is here
too: the retained-segment index, expiry's view of the records, the answer about
unregistered records, the clock and when the last pass ran.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from . import layout
from .admission import Admission
from .config import StoreConfig
from .expiry import SubscriberExpiry
from .gauges import observe
from .metrics import PROCESS, THROTTLED, WRITER, WRITER_HEARTBEAT, Metrics, metrics_key
from .objects import ObjectStore
from .partition import PartitionWriter
from .policy import StorePolicy, read_policy
from .retained import RetainedIndex
from .retention import AnchoredClock, RetentionResult, apply_retention, preview_retention
from .retention_plan import RetentionPlan
from .seams import SubscriberNames
from .segment import SegmentLocation
from .subscribers import SubscriberRegistry, records
from .subscribers.live import LiveLocks

RECORDS_PERIOD_S = 60.0
"""How long a handle's retention passes reuse what the subscription records said about
subscribers the ack log does not register (:meth:`StoreRetention.unregistered_records`)
while the registered set is unchanged: records of other names change only with a
registration (which changes the set) or by an operator's hand."""


class RetainingStore(Protocol):
    """What a retention pass reads of the store handle that runs it (a
    :class:`~quiver_spark.store.QuiverStore`)."""

    root: str
    config: StoreConfig
    objects: ObjectStore
    segment_location: SegmentLocation
    metrics: Metrics
    writer: PartitionWriter | None

    @property
    def subscribers(self) -> SubscriberRegistry: ...

    def has_registry(self) -> bool: ...

    def wal_bytes(self) -> dict[str, int]: ...

    def apply_policy(self, policy: StorePolicy) -> None: ...


class StoreRetention:
    """The retention passes of ``store``; ``admission`` is the store's, which its
    appends ask and each pass settles; ``live``: its live-consumer locks, which its
    root's kind built (a live consumer's subscriber is never expired)."""

    def __init__(self, store: RetainingStore, admission: Admission, live: LiveLocks) -> None:
        self._store = store
        self._admission = admission
        self.lock = threading.Lock()  # the ack-log flock does not order threads
        self.index = RetainedIndex()
        """What the passes read, kept current between them (ARCHITECTURE.md §15.1)."""
        self.expiry = SubscriberExpiry(store.root, store.objects, live)
        self.clock = AnchoredClock()
        self.last_pass = float("-inf")
        """When the last pass ran (``time.monotonic``); the first tick runs one."""
        # the last answer of unregistered_records: registered names, when, the answer
        self._unregistered: tuple[frozenset[str], float, list[str]] | None = None
        self._restored: set[str] = set()  # metrics files whose counters were continued

    def run(
        self, now_ns: int | None = None, *, dry_run: bool = False, listing: bool = False
    ) -> RetentionResult:
        """One pass (see :meth:`QuiverStore.run_retention`)."""
        s = self._store
        with self.lock:
            recorded = read_policy(s.objects)
            if recorded is not None:  # a change made elsewhere applies from this pass on
                s.apply_policy(recorded)
            r = s.config.retention
            now = self.clock.now_ns() if now_ns is None else now_ns
            has_registry = s.has_registry()
            if dry_run:
                registry = s.subscribers if has_registry else None
                if registry is not None:
                    registry.refresh()
                return preview_retention(
                    s.segment_location, registry, r, now, wal_bytes=s.wal_bytes(),
                    unregistered=self.unregistered_records(registry),
                )  # fmt: skip
            if not has_registry and r.size_cap_bytes is None and r.max_age_hours is None:
                # no subscriber ever registered and no safety net configured: nothing
                # may be deleted, and a read of the registry would create its directory
                return RetentionResult(plan=RetentionPlan(), deleted={}, dropped={})
            expired = (
                self.expiry.expire_idle(s.subscribers, s.config.subscriber_expire_after_s, now)
                if has_registry
                else []
            )
            counted = self._admission.counted()  # admitted before this listing are in it
            wal = s.wal_bytes()
            result = apply_retention(
                s.segment_location,
                s.subscribers,
                r,
                now,
                wal_bytes=wal,
                metrics=s.metrics,
                index=self.index,
                listing=listing,
                unregistered=self.unregistered_records,
                on_dropped=self.expiry.note_drops,
            )
            self._admission.settle(counted, result.plan.bytes_after, result.throttle)
            self.last_pass = time.monotonic()
            self._publish_metrics(now, wal)
            result.expired = expired
            return result

    def survey_held_bytes(self) -> None:
        """Count for admission the bytes the store holds (WAL + segments, damaged ones
        included), surveyed without the subscriber registry; nothing is deleted, since
        what subscribers acknowledged is unknown (§15.2)."""
        s = self._store
        cap = s.config.retention.size_cap_bytes
        with self.lock:
            counted = self._admission.counted()  # admitted before this listing are in it
            held = sum(s.wal_bytes().values())
            index = RetainedIndex()
            index.sync(s.segment_location, None, full=True)
            held += index.total_bytes() + sum(d.size_bytes for d in index.damaged())
            self._admission.settle(counted, held, cap is not None and held > cap)

    def unregistered_records(self, registry: SubscriberNames | None) -> list[str]:
        """See :meth:`QuiverStore.unregistered_records`; the answer is reused for
        :data:`RECORDS_PERIOD_S` while the registered names stay the same."""
        names = frozenset(registry.subscribers() if registry is not None else [])
        now = time.monotonic()
        last = self._unregistered
        if last is not None and last[0] == names and now - last[1] < RECORDS_PERIOD_S:
            return list(last[2])
        found = records.unregistered(self._store.objects, names)
        self._unregistered = (names, now, found)
        return list(found)

    def _publish_metrics(self, now_ns: int, wal: dict[str, int]) -> None:
        """Refresh in-process gauges from the index the pass kept current, and rewrite a
        writer's own metrics file (its partition's series and what this process did;
        store-wide figures are ``quiver metrics``'s, ARCHITECTURE.md §20)."""
        s = self._store
        open_bytes = {}
        if s.writer is not None:
            open_bytes[s.writer.pid] = s.writer.status()["open_segment_bytes"]
        observe(
            s.metrics,
            s.subscribers,
            self.index,
            now_ns,
            wal_bytes=wal,
            open_bytes=open_bytes,
        )
        if s.writer is not None:  # one file per partition: writers never share a name
            pid = s.writer.pid
            s.metrics.set(THROTTLED, 1 if self._admission.throttled else 0, partition=pid)
            s.metrics.set(WRITER_HEARTBEAT, time.time(), partition=pid)
            self.publish_process_metrics(
                layout.writer_metrics_instance(pid), scopes=(PROCESS, WRITER), partition=pid
            )

    def publish_process_metrics(
        self, instance: str, *, scopes: tuple[str, ...] = (PROCESS,), partition: str | None = None
    ) -> str:
        """See :meth:`QuiverStore.publish_process_metrics`."""
        s = self._store
        objects, key = s.objects, metrics_key(instance)
        if instance not in self._restored:
            self._restored.add(instance)
            s.metrics.restore_counters_from(objects, key)
        s.metrics.write_prometheus_object(
            objects, key, scopes=scopes, instance=instance, partition=partition
        )
        return objects.display(key)
