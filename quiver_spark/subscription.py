"""Consuming a store as a subscriber: plan, read, acknowledge (ARCHITECTURE.md §9b).

A :class:`Subscription` is one named consumer of a store. It turns the store's
finalized segments into :class:`~quiver_spark.position.Position` ranges, reads them
verified, and records every position it finishes as a durable acknowledgement, after
which one retention pass (:meth:`QuiverStore.run_retention`, the store's policy)
reclaims what every subscriber is done with. The Spark source is a translation of
its offsets to these calls; an embedded consumer uses them directly::

    with Subscription.open("/data/quiver", "forwarder") as sub:
        while (batch := sub.poll(Caps(max_segments=8))) is not None:
            for meta in batch.segments:
                for rb in sub.read(meta):
                    forward(rb)
            sub.ack(batch.end)          # durable; the segments may now be reclaimed

Everything it decides (start positions, admission under caps, the data-loss policy
for a missing sequence, acknowledgements) runs without a JVM.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pyarrow as pa

from . import format as fmt
from .config import StoreConfig, validate_name
from .errors import (
    ConfigError,
    CorruptionError,
    DataLossError,
    LockedError,
    QuiverError,
    SegmentMissingError,
    StoreNotFoundError,
    SubscriberError,
    UnknownSegmentError,
)
from .fs import DEFAULT_IO, FileIO, PartitionLock
from .metrics import SOURCE_ACKED, SOURCE_DROPPED, SOURCE_LOST, Metrics
from .missing import CORRUPT, DELETED, MISSING, MissingSegment, PartitionEvidence, evidence
from .options import parse_choice
from .position import Position
from .segment import SegmentLocation, SegmentMeta
from .store import QuiverStore
from .subscribers import Outcome, StartPosition, SubscriberRegistry, records

log = logging.getLogger(__name__)

READERS_DIR = "readers"
LOST_SUFFIX = ".lost.jsonl"
BATCH_READS = "_batch"

RETENTION_IDLE_PERIOD_S = 5.0
"""Retention also runs this often from a consumer that acknowledged nothing new."""
FULL_LISTING_PERIOD_S = 300.0
"""A consumer lists every partition's segments when the location's quarantine mark
changed (§5.5) and otherwise only this often, as a safety net for files removed by
hand; in between it probes the next seqs (seqs are gapless, and a hole is a seq the
ack log records deleted or a known quarantined one), so planning does not grow with
retained segments."""
OPEN_RETRY_S = 0.5
"""Pause before the one retry of a planned segment whose file was not found."""
RECORD_PERIOD_S = 1.0
"""A consumer rewrites its subscription record's last-ack time at most this often."""


class Start(Enum):
    """Where a consumer without a position of its own starts."""

    EARLIEST = "earliest"
    LATEST = "latest"
    ACKED = "acked"


def start_of(position: Start | str | None) -> Start | None:
    """``position`` as a :class:`Start`: one, None, or a name ``startingPosition``
    takes (``earliest``, ``latest``, ``acked``, any case)."""
    if position is None or isinstance(position, Start):
        return position
    names = [s.value for s in Start]
    if not isinstance(position, str):
        raise ConfigError("position", position, " | ".join(names))
    return Start(parse_choice("position", position, names))


@dataclass(frozen=True)
class Caps:
    """Admission limits of one planned batch (None: unlimited). A batch always
    admits at least one segment, so a segment larger than a cap still progresses."""

    max_segments: int | None = None
    max_bytes: int | None = None
    max_rows: int | None = None

    def tightened(self, other: Caps) -> Caps:
        """The lower of each limit."""

        def lower(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return Caps(
            lower(self.max_segments, other.max_segments),
            lower(self.max_bytes, other.max_bytes),
            lower(self.max_rows, other.max_rows),
        )


@dataclass(frozen=True)
class Batch:
    """A planned batch: the segments in ``(start, end]`` that can be read."""

    start: Position
    end: Position
    segments: list[SegmentMeta]


@dataclass
class _Available:
    """A segment available to plan (meta None: unreadable metadata, or quarantined)."""

    partition: str
    seq: int
    meta: SegmentMeta | None

    @property
    def order(self) -> int:
        return self.meta.min_ingestion_ns if self.meta else 0


# -- the lost-segment log -------------------------------------------------------------------
class LostLog:
    """``<root>/readers/<subscriber>.lost.jsonl``: segments a consumer skipped or failed
    on (advisory, for operators: one JSON object a line, ARCHITECTURE.md §1)."""

    def __init__(self, root: str, subscriber: str | None, io: FileIO = DEFAULT_IO) -> None:
        self.path = os.path.join(root, READERS_DIR, f"{subscriber or BATCH_READS}{LOST_SUFFIX}")
        self.io = io

    def record(
        self, partition: str, seq: int, reason: str, *, skipped: bool, evidence: str | None
    ) -> None:
        """Append one line; best effort (a log that cannot be written never fails a read).

        Each line is one ``write`` on an ``O_APPEND`` descriptor, so lines written by
        concurrent tasks do not interleave.
        """
        line = {"partition": partition, "seq": seq, "reason": reason, "skipped": skipped}
        if evidence:
            line["evidence"] = evidence
        line["at_ns"] = time.time_ns()
        data = json.dumps(line).encode() + b"\n"
        try:
            self.io.mkdir(os.path.dirname(self.path))
            fd = self.io.open_append(self.path)
            try:
                self.io.write(fd, data)
            finally:
                self.io.close(fd)
        except OSError as e:
            log.warning("quiver.source.data_loss_unrecorded path=%s error=%s", self.path, e)

    def report(self) -> dict[str, Any]:
        """Deduplicated: ``{"dropped": n, "lost": n, "segments": [...]}`` (``dropped``:
        deleted by retention, always skipped; ``lost``: skipped with failOnDataLoss=false)."""
        seen: dict[tuple[str, int], dict[str, Any]] = {}
        try:
            raw = self.io.read_file(self.path)
        except FileNotFoundError:
            raw = b""
        for line in raw.splitlines():
            try:
                rec = json.loads(line)
                seen.setdefault((str(rec["partition"]), int(rec["seq"])), rec)
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
        segs = [seen[k] for k in sorted(seen)]
        skipped = [s for s in segs if s.get("skipped")]
        return {
            "dropped": sum(1 for s in skipped if s["reason"] == "dropped"),
            "lost": sum(1 for s in skipped if s["reason"] != "dropped"),
            "segments": segs,
        }


def settle_missing(
    found: MissingSegment,
    *,
    subscriber: str | None,
    fail_on_data_loss: bool,
    lost: LostLog,
    metrics: Metrics | None = None,
) -> None:
    """The one data-loss policy: a segment retention deleted is skipped (counted as
    dropped); any other missing one is data loss: recorded, then raised as
    :class:`DataLossError` under ``fail_on_data_loss``, else skipped and counted."""
    if found.kind == DELETED:
        log.warning(
            "quiver.source.segment_dropped partition=%s seq=%d subscriber=%s",
            found.partition,
            found.seq,
            subscriber,
        )
        lost.record(found.partition, found.seq, "dropped", skipped=True, evidence=None)
        if metrics is not None:
            metrics.inc(SOURCE_DROPPED, subscriber=subscriber or BATCH_READS)
        return
    lost.record(
        found.partition,
        found.seq,
        found.kind,
        skipped=not fail_on_data_loss,
        evidence=found.evidence,
    )
    if metrics is not None:
        metrics.inc(SOURCE_LOST, subscriber=subscriber or BATCH_READS, reason=found.kind)
    if fail_on_data_loss:
        raise DataLossError(
            found.partition,
            found.seq,
            f"{found.kind}: {found.describe()}; set failOnDataLoss=false to skip it and "
            "count the loss",
            kind=found.kind,
            evidence=found.evidence,
        )
    log.warning(
        "quiver.source.data_loss partition=%s seq=%d reason=%s subscriber=%s",
        found.partition,
        found.seq,
        found.kind,
        subscriber,
    )


def corrupt_meta(partition: str, seq: int, error: CorruptionError) -> MissingSegment:
    """A published segment whose ``.meta`` fails verification, as a data-loss finding."""
    return MissingSegment(partition, seq, CORRUPT, error.path, str(error))


def open_planned(location: SegmentLocation, meta: SegmentMeta, *, verify: bool = True) -> Any:
    """Open a planned segment; a file that is not there is looked for once more after a
    short pause (an object store's read may fail transiently) before it counts as gone."""
    try:
        return location.open(meta, verify=verify)
    except SegmentMissingError:
        time.sleep(OPEN_RETRY_S)
        return location.open(meta, verify=verify)


def classify_vanished(
    root: str, location: SegmentLocation, partition: str, seq: int
) -> MissingSegment:
    """Why a planned segment is gone (from a read task): deleted, quarantined, missing."""
    reg = None
    if os.path.isdir(os.path.join(root, fmt.SUBSCRIBERS_DIR)):
        try:
            reg = SubscriberRegistry.open(root)
        except (OSError, CorruptionError) as e:
            log.warning("quiver.source.registry_unreadable root=%s error=%s", root, e)
    try:
        found = evidence(location, reg, partition).classify(seq)
    finally:
        if reg is not None:
            reg.close()
    return found or MissingSegment(partition, seq, MISSING)


# -- one live consumer per subscriber ---------------------------------------------------------
LIVE_PURPOSE = "live consumer"
"""How a live-consumer lock names its holder's role (``readers/<subscriber>.lock``)."""


@dataclass
class _LiveHolder:
    owner: weakref.ReferenceType[Any]  # the consumer; dead once it is garbage
    lock: PartitionLock


_live_mutex = threading.Lock()
_live: dict[str, _LiveHolder] = {}  # real lock path -> this process's holder


def live_lock_path(root: str, subscriber: str) -> str:
    """``<root>/readers/<subscriber>.lock``: held by the subscriber's live consumer."""
    return os.path.join(root, READERS_DIR, f"{subscriber}.lock")


def _holder_of(path: str) -> str:
    """What the lock file says of its holder: ``pid N on HOST (ROLE since T)``."""
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read(4096).decode() or "{}")
        return (
            f"pid {info.get('pid', '?')} on {info.get('host', '?')} "
            f"({info.get('purpose', LIVE_PURPOSE)} since {info.get('since', '?')})"
        )
    except (OSError, ValueError):
        return "a consumer whose lock file cannot be read"


def _refusal(subscriber: str, path: str, holder: str) -> SubscriberError:
    return SubscriberError(
        f"subscriber {subscriber!r} already has a live consumer: its live-consumer lock "
        f"{path} is held by {holder}; a subscriber has one live consumer at a time: stop "
        "that query or process (or close() that Subscription), or give this consumer its "
        "own subscriber id (option('subscriber', ...))"
    )


def claim_live(root: str, subscriber: str, owner: object) -> None:
    """Hold ``<root>/readers/<subscriber>.lock`` for consumer ``owner``.

    A second live consumer of the subscriber is refused, whether it is in another
    process (the ``flock``) or in this one (a holder that is still reachable). A
    holder of this process that was dropped without closing (a replaced reader: an
    object nobody references any more) has ended, so its lock is taken over.
    """
    path = live_lock_path(root, subscriber)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    key = os.path.realpath(path)
    with _live_mutex:
        held = _live.get(key)
        if held is not None and held.owner() is not None:
            gc.collect()  # a dropped holder caught in a reference cycle is freed here
        if held is not None:
            if held.owner() is not None:
                raise _refusal(subscriber, path, f"{_holder_of(path)}, in this process")
            _live[key] = _LiveHolder(weakref.ref(owner), held.lock)
            return
        try:
            lock = PartitionLock.acquire(path, purpose=LIVE_PURPOSE)
        except LockedError as e:  # the holder says all; the flock's own error is noise
            raise _refusal(subscriber, path, e.holder) from None
        _live[key] = _LiveHolder(weakref.ref(owner), lock)


def release_live(root: str, subscriber: str, owner: object) -> None:
    """Release the subscriber's live-consumer lock if ``owner`` holds it."""
    key = os.path.realpath(live_lock_path(root, subscriber))
    with _live_mutex:
        held = _live.get(key)
        if held is not None and held.owner() is owner:
            del _live[key]
            held.lock.release()


def open_store(path: str, config: StoreConfig | None = None) -> QuiverStore:
    """A read/maintain handle on an existing store (a consumer creates nothing)."""
    try:
        return QuiverStore.open(path, config, partition=None, create=False, background=False)
    except StoreNotFoundError as e:
        raise StoreNotFoundError(
            f"{path} is not a Quiver store yet: start the writer first "
            "(df.writeStream.format('quiver').start(path)) or check the path"
        ) from e


# -- the subscription -------------------------------------------------------------------------
@dataclass
class _State:
    metas: dict[tuple[str, int], SegmentMeta | None] = field(default_factory=dict)
    meta_errors: dict[tuple[str, int], CorruptionError] = field(default_factory=dict)
    latest: Position | None = None
    last_seal: float = 0.0
    last_retention: float = 0.0
    retention_failed: bool = False
    last_touch: float = float("-inf")
    last_full_listing: float = float("-inf")
    quarantine_mark: bytes | None = None
    known: dict[str, list[int]] = field(default_factory=dict)
    quarantined: dict[str, set[int]] = field(default_factory=dict)


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
    ) -> None:
        self.store = store
        self.name = validate_name("subscriber", name)
        self.fail_on_data_loss = fail_on_data_loss
        self.metrics = metrics if metrics is not None else store.metrics
        self.lost = LostLog(store.root, name, store.io)
        self._owns_store = owns_store
        self._live = live
        self._state = _State()
        self._registered = False  # seen registered (a live consumer is never expired)
        self._given_back: dict[str, set[int]] | None = None  # nacked, not delivered since
        if live:
            claim_live(store.root, name, self)
        try:
            self.registry: SubscriberRegistry = store.subscribers
        except BaseException:
            if live:
                release_live(store.root, name, self)
            raise

    @classmethod
    def open(
        cls,
        path: str,
        name: str,
        *,
        config: StoreConfig | None = None,
        fail_on_data_loss: bool = True,
        live: bool = True,
    ) -> Subscription:
        """Open subscriber ``name`` on the store at ``path`` (registered by :meth:`start`)."""
        store = open_store(os.path.abspath(path), config)
        try:
            return cls(store, name, fail_on_data_loss=fail_on_data_loss, live=live, owns_store=True)
        except BaseException:
            store.close()
            raise

    # -- facts ------------------------------------------------------------------------------
    @property
    def location(self) -> SegmentLocation:
        return self.store.segment_location

    def registered(self) -> bool:
        self.registry.refresh()
        self._registered = self.name in self.registry.subscribers()
        return self._registered

    def _require_registered(self, *, new_ok: bool) -> None:
        """Refuse to go on for a subscriber the store expired (its tombstone record) and,
        unless ``new_ok`` (planning, which a new subscriber may do before ``start``),
        for one that is not registered: a consumer resuming from a position of its own
        (a Spark checkpoint) meets this at its first call, before any row is served."""
        if self._registered or self.registered():
            return
        self._refuse_if_expired()
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
        """Cached metadata (immutable once published); None when it fails verification.

        Raises SegmentMissingError when the segment is not published (any more).
        """
        key = (partition, seq)
        st = self._state
        if key in st.metas:
            return st.metas[key]
        try:
            meta = self.location.cached(partition, seq) or self.location.read_meta(partition, seq)
        except CorruptionError as e:
            log.warning(
                "quiver.source.meta_corrupt partition=%s seq=%d error=%s", partition, seq, e
            )
            meta = None
            st.meta_errors[key] = e
        st.metas[key] = meta
        return meta

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

    def available(self, after: Position) -> dict[str, list[_Available]]:
        """Segments above ``after`` per partition, ascending: the published ones and the
        quarantined ones (planning a quarantined seq is what reports its loss).

        Its cost does not grow with the retained segments: seqs are gapless (§5), so
        new segments are found by probing the next seqs of each partition (passing over
        seqs the ack log records deleted), and metadata is read once; every partition
        is listed only when the quarantine mark changed (§5.5) or every
        ``FULL_LISTING_PERIOD_S``.
        """
        known, quarantined = self._known_seqs()
        out: dict[str, list[_Available]] = {}
        for p, seqs in known.items():
            floor = after.get(p)
            i = bisect.bisect_right(seqs, floor)
            del seqs[: max(0, i - 1)]  # never planned again from here on
            segs = []
            for seq in seqs:
                if seq <= floor:
                    continue
                try:
                    segs.append(_Available(p, seq, self.meta(p, seq)))
                except SegmentMissingError:
                    continue  # deleted since it was seen
            segs.extend(_Available(p, q, None) for q in quarantined.get(p, ()) if q > floor)
            if segs:
                out[p] = sorted(segs, key=lambda a: a.seq)
        return out

    def _known_seqs(self) -> tuple[dict[str, list[int]], dict[str, set[int]]]:
        st = self._state
        now = time.monotonic()
        mark = self.location.quarantine_mark()
        if now - st.last_full_listing >= FULL_LISTING_PERIOD_S or mark != st.quarantine_mark:
            known: dict[str, list[int]] = {}
            quarantined: dict[str, set[int]] = {}
            for p in self.store.partitions():
                known[p] = self.location.published_seqs(p)
                gone = set(self.location.quarantined(p)) - set(known[p])
                if gone:
                    quarantined[p] = gone
            # kept only once the whole listing succeeded: a failed one is retried
            st.known, st.quarantined = known, quarantined
            st.last_full_listing, st.quarantine_mark = now, mark
            return st.known, st.quarantined
        self.registry.refresh()
        starts = {}
        for p in self.store.partitions():  # one listing of partition names
            seqs = st.known.setdefault(p, [])
            # every seq up to the ack log's deleted floor is gone: a partition whose
            # segments were all deleted is probed past its history, not through it
            floor, _ = self.registry.deleted_marks(p)
            starts[p] = max(seqs[-1] + 1 if seqs else 1, floor + 1)

        def hole(p: str, seq: int) -> bool:  # deleted before this consumer saw it, or moved aside
            return seq in st.quarantined.get(p, ()) or self.registry.is_deleted(p, seq)

        for p, new in self.location.probe_next(starts, skip=hole).items():
            st.known[p].extend(f.seq for f in new)
        return st.known, st.quarantined

    def top(self) -> Position:
        """The highest seq published or quarantined per partition (what exists now)."""
        return Position(
            {
                p: top
                for p in self.store.partitions()
                if (
                    top := max(
                        [*self.location.published_seqs(p), *self.location.quarantined(p)],
                        default=0,
                    )
                )
            }
        )

    # -- positions ------------------------------------------------------------------------------
    def acked(self) -> Position:
        """Per partition, the highest seq through which everything is acknowledged."""
        self._require_registered(new_ok=False)
        self.registry.refresh()
        return Position(
            {p: h for p in self.store.partitions() if (h := self.registry.hwm(self.name, p)) > 0}
        )

    def start(
        self, position: Start | str | None = None, *, since_ns: int | None = None
    ) -> Position:
        """Register the subscriber if new and return where a consumer without a
        position of its own starts: ``acked`` (default for a known subscriber),
        ``earliest`` (default for a new one: the first retained or lost segment) or
        ``latest`` (after everything published now). ``since_ns`` instead starts at the
        first segment holding a row ingested at or after that time (epoch ns), so no
        such row is missed (rows of that segment ingested before it come along).
        ``position`` may be named as the ``startingPosition`` option is."""
        wanted = start_of(position)
        self.seal_idle(force=True)
        # A seq published once but now lost (quarantined, vanished) counts as retained:
        # an earliest start plans it, so its loss is reported (§9a), never skipped.
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
        # expiry pass holds too: never a silent restart of an expired subscriber
        with self.registry.exclusive():
            known = self.name in self.registry.subscribers()
            if not known:
                self._refuse_if_expired()
            position = wanted or (Start.ACKED if known else Start.EARLIEST)
            self.registry.register(
                self.name,
                start=by_time
                if by_time is not None
                else StartPosition.LATEST
                if position is Start.LATEST
                else StartPosition.EARLIEST,
                retained=retained,
                exist_ok=True,
            )
            self._registered = True
            if not known:
                try:
                    records.create_record(
                        self.store.root,
                        self.store.io,
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
            elif position is Start.ACKED or not seqs:
                marks[p] = hwm
            elif position is Start.EARLIEST:
                marks[p] = found[p].first_unread() - 1
            else:
                marks[p] = found[p].highest
        log.info(
            "quiver.source.start subscriber=%s position=%s known=%s offset=%s",
            self.name,
            position.value,
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
        self, after: Position, caps: Caps = Caps(), until: Position | None = None
    ) -> Position:
        """The end of the next batch after ``after``: segments admitted oldest first
        (by ingestion time, across partitions) under ``caps``, never past ``until``;
        at least one segment when any is available."""
        self._require_registered(new_ok=True)
        self.seal_idle()
        avail = self.available(after)
        self._state.latest = after.merged({p: v[-1].seq for p, v in avail.items()})
        if until is not None:
            avail = {p: [a for a in v if a.seq <= until.get(p)] for p, v in avail.items()}
        heads = [(v[0].order, p, 0) for p, v in avail.items() if v]
        heapq.heapify(heads)
        admitted: dict[str, int] = {}
        n = nbytes = rows = 0
        while heads:
            _, p, i = heads[0]
            a = avail[p][i]
            size = a.meta.size_bytes if a.meta else 0
            count = a.meta.rows if a.meta else 0
            if n and (
                (caps.max_segments is not None and n + 1 > caps.max_segments)
                or (caps.max_bytes is not None and nbytes + size > caps.max_bytes)
                or (caps.max_rows is not None and rows + count > caps.max_rows)
            ):
                break
            n, nbytes, rows = n + 1, nbytes + size, rows + count
            admitted[p] = a.seq
            heapq.heappop(heads)
            if i + 1 < len(avail[p]):
                heapq.heappush(heads, (avail[p][i + 1].order, p, i + 1))
        end = after.merged(admitted)
        if admitted:
            log.debug(
                "quiver.source.plan segments=%d bytes=%d rows=%d end=%s",
                n,
                nbytes,
                rows,
                end.segments,
            )
        return end

    plan = next_batch_end
    """The earlier name of :meth:`next_batch_end`, kept for callers that use it."""

    @property
    def latest(self) -> Position | None:
        """Everything available at the last :meth:`next_batch_end` (for lag reporting)."""
        return self._state.latest

    def segments(
        self, start: Position, end: Position, *, pending_only: bool = False
    ) -> list[SegmentMeta]:
        """The readable segments in ``(start, end]``, each missing one settled by the
        data-loss policy (:func:`settle_missing`): a pure function of the positions but
        for segments that are no longer there. ``pending_only`` passes over the seqs
        this subscriber already acknowledged (above its mark, beside a nacked one).

        Nacked seqs in the range count as delivered again from here on: a later
        :meth:`ack` through them acknowledges them."""
        self._require_registered(new_ok=True)
        given_back = self._nacked() if self._registered else {}
        out: list[SegmentMeta] = []
        refreshed = False
        ranges = start.ranges(end)
        for p, (lo, hi) in ranges.items():
            ev: PartitionEvidence | None = None
            for seq in range(lo, hi + 1):
                if pending_only and self.registry.is_done(self.name, p, seq):
                    continue
                try:
                    meta = self.meta(p, seq)
                except SegmentMissingError:
                    if not refreshed:
                        self.registry.refresh()
                        refreshed = True
                    ev = ev or self.evidence(p)
                    found = ev.classify(seq)
                    if found is None:  # published since our first look
                        try:
                            meta = self.meta(p, seq)
                        except SegmentMissingError:
                            found = MissingSegment(p, seq, MISSING)
                    if found is not None:
                        self._settle(found)
                        continue
                if meta is None:
                    self._settle(corrupt_meta(p, seq, self._state.meta_errors[(p, seq)]))
                    continue
                out.append(meta)
        for p, (lo, hi) in ranges.items():
            if given_back.get(p):
                given_back[p] = {s for s in given_back[p] if not lo <= s <= hi}
        return out

    def _nacked(self) -> dict[str, set[int]]:
        """Per partition, the seqs nacked and not delivered again since (loaded from the
        ack log once: a nack outlives the process that made it)."""
        if self._given_back is None:
            self.registry.refresh()
            self._given_back = {
                p: set(seqs)
                for p in self.store.partitions()
                if (seqs := self.registry.nacked(self.name, p))
            }
        return self._given_back

    def _refuse_if_expired(self) -> None:
        try:
            rec = records.read_record(self.store.root, self.store.io, self.name)
        except CorruptionError as e:
            raise SubscriberError(
                f"subscriber {self.name!r} is not registered and its record is damaged "
                f"({e}), so whether the store expired it cannot be told; to start it over: "
                f"quiver subscribers {self.store.root} remove {self.name}, then add it"
            ) from e
        if rec is None or rec.expired_ns is None:
            return
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(rec.expired_ns / 1e9))
        raise SubscriberError(
            f"subscriber {self.name!r} expired at {when}: it had not acknowledged for "
            f"longer than subscriber.expire_after ({rec.expired_after_s or 0:.0f}s), so the "
            "store deregistered it and released what it pinned. To start it over from the "
            f"retained data: quiver subscribers {self.store.root} add {self.name}"
        )

    def _settle(self, found: MissingSegment) -> None:
        settle_missing(
            found,
            subscriber=self.name,
            fail_on_data_loss=self.fail_on_data_loss,
            lost=self.lost,
            metrics=self.metrics,
        )

    def poll(self, caps: Caps = Caps()) -> Batch | None:
        """The next batch after what is acknowledged (registering the subscriber on
        first use), or None when nothing new is available."""
        if not self.registered():
            self.start()
        begin = self.acked()
        end = self.next_batch_end(begin, caps)
        if not end.is_after(begin):
            return None
        return Batch(begin, end, self.segments(begin, end, pending_only=True))

    def read(self, meta: SegmentMeta, *, verify: bool = True) -> Iterator[pa.RecordBatch]:
        """The rows of one planned segment, verified (size and CRC-32C) before the
        first batch; a segment gone since planning is settled by the data-loss policy."""
        try:
            reader = open_planned(self.location, meta, verify=verify)
        except SegmentMissingError:
            self._settle(
                classify_vanished(self.store.root, self.location, meta.partition, meta.seq)
            )
            return
        except CorruptionError as e:
            self._settle(corrupt_meta(meta.partition, meta.seq, e))
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
        """
        self._require_registered(new_ok=False)
        self.registry.refresh()
        self._check_assigned(through)
        given_back = self._nacked()
        todo: dict[str, list[int]] = {}
        for p, hi in through.segments.items():
            lo = self.registry.hwm(self.name, p) + 1
            held = given_back.get(p, ())
            seqs = [
                s
                for s in range(lo, hi + 1)
                if s not in held and not self.registry.is_done(self.name, p, s)
            ]
            if seqs:
                todo[p] = seqs
        n = sum(len(v) for v in todo.values())
        st = self._state
        now = time.monotonic()
        if todo:
            self.registry.record_many(self.name, todo, Outcome.ACK)
            self.metrics.inc(SOURCE_ACKED, n, subscriber=self.name)
            if now - st.last_touch >= RECORD_PERIOD_S:  # its record: last acknowledged
                st.last_touch = now
                try:  # advisory: a record that cannot be updated never fails an ack
                    records.touch(
                        self.store.root,
                        self.store.io,
                        self.name,
                        progress=self.registry.done_count(self.name),
                    )
                except (OSError, CorruptionError) as e:
                    log.warning("quiver.subscriber.record_unwritten %s: %s", self.name, e)
        deleted = 0
        if todo or st.retention_failed or now - st.last_retention >= RETENTION_IDLE_PERIOD_S:
            st.last_retention = now
            deleted = self._retention_after_ack()
        if todo or deleted:
            self._publish_metrics()
        st.metas = {k: v for k, v in st.metas.items() if not through.covers(*k)}
        st.meta_errors = {k: v for k, v in st.meta_errors.items() if not through.covers(*k)}
        if todo or deleted:
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
            self.store.publish_process_metrics(f"consumer-{self.name}")
        except OSError as e:
            log.warning("quiver.metrics.unwritten subscriber=%s error=%s", self.name, e)

    def _check_assigned(self, through: Position) -> None:
        """Refuse a position past what a partition ever published (nothing written): an
        ack there would mark future segments done before anyone read them."""
        for p, hi in through.segments.items():
            if hi <= self.registry.hwm(self.name, p):
                continue
            top = max([self.registry.max_deleted(p), *self._state.known.get(p, [])[-1:]])
            if hi <= top or self.location.is_published(p, hi):
                continue  # seqs are gapless: every seq below a published one was too
            if hi in self.location.quarantined(p):
                continue
            top = max([top, *self.location.published_seqs(p)[-1:]])
            if hi > top:
                raise UnknownSegmentError(
                    f"cannot acknowledge partition {p!r} through segment {hi} for "
                    f"subscriber {self.name!r}: the partition has published only up to "
                    f"{top}; a position must come from this store's next_batch_end()"
                )

    def nack(self, partition: str, seqs: Sequence[int]) -> None:
        """Mark ``seqs`` as not processed: they stay pending, a later :meth:`ack` through
        them passes over them, and they are delivered again (``poll`` plans from the
        acknowledged mark, so it delivers them first). Durable before it returns."""
        self._require_registered(new_ok=False)
        seqs = list(seqs)
        self.registry.record(self.name, partition, seqs, Outcome.NACK)
        pending = [s for s in seqs if not self.registry.is_done(self.name, partition, s)]
        if pending:  # recorded: only now part of what this consumer holds back
            self._nacked().setdefault(partition, set()).update(pending)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        if self._live:  # expiry counts from when it was last live (ARCHITECTURE.md §8.10)
            try:
                done = (
                    self.registry.done_count(self.name)
                    if self.name in self.registry.subscribers()
                    else None
                )
                records.note_live(self.store.root, self.store.io, self.name, progress=done)
            except (OSError, CorruptionError) as e:  # advisory: never fails a close
                log.warning("quiver.subscriber.record_unwritten %s: %s", self.name, e)
        try:
            if self._owns_store:
                self.store.close()
        finally:
            if self._live:
                release_live(self.store.root, self.name, self)
                self._live = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
