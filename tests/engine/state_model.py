"""A model of what a Quiver store must hold, and a harness driving the public API.

:class:`StoreHarness` owns one store directory (optionally with ``wal.path`` outside
the root, the executor-local layout of ARCHITECTURE.md §21), two writer partitions
opened as separate :class:`~quiver_spark.QuiverStore` handles, a read/maintain handle
(the "driver": commit decisions, subscribers, retention) and a model of every row
ever offered to the store. Every row carries a unique int64 key ``k``, so after each
reopen the harness can check, row by row:

- every acknowledged plain row (``flush()`` returned after its append, or the append
  returned under ``wal.flush_interval=0``) and every row of a committed transaction
  (decided after its records were flushed) is readable exactly once, unless
  retention legitimately deleted its segment;
- nothing undecided, discarded or refused is ever visible;
- no (partition, segment seq) is ever published with two different contents, and a
  segment the ack log records as deleted never comes back;
- under ``backpressure`` nothing a registered subscriber has not acknowledged is
  deleted; a segment deleted unacknowledged (``drop_oldest``, time retention) is
  recorded as done (dropped) for every subscriber;
- damage is contained: a damaged partition opens or fails with a QuiverError naming
  the damaged file, everything else keeps opening, writing, reading and reclaiming.

The harness is used by the generative test (``test_state_space.py``), which draws the
operations, and by the regression tests, which replay shrunk sequences by hand. Each
broken invariant raises its own :class:`Violation` subclass (so hypothesis keeps
distinct failures apart). Counters for the run's report accumulate in :data:`STATS`.
"""

from __future__ import annotations

import dataclasses
import errno as errno_mod
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from quiver_spark import (
    QuiverError,
    QuiverStore,
    RetentionConfig,
    SchemaMismatchError,
    SegmentConfig,
    SizeCapPolicy,
    StoreAtCapacityError,
    StoreConfig,
    WalConfig,
)
from quiver_spark.errors import (
    CorruptionError,
    SegmentMissingError,
    StoreClosedError,
    SubscriberError,
    WalFailedError,
)
from quiver_spark.objects.local import LOCK_NAME as OBJECTS_LOCK
from quiver_spark.subscribers import Outcome
from quiver_spark.subscription import Batch, Caps, Subscription
from quiver_spark.subscription.catchup import resumed_position
from tests.damage import flip_byte
from tests.faults import FILE_KINDS, CrashSimulator, FaultyIO, FaultyMemoryFS, file_kind

STATS: Counter[str] = Counter()
"""Figures of the run: sequences, steps, invariant checks, faults fired per point..."""

FAULT_POINTS: set[tuple[str, str, str, bool]] = set()
"""Distinct (operation, file kind, errno, partial) at which an injected fault fired."""

FIRED: Counter[tuple[str, str, str]] = Counter()
"""Injected faults that fired per (operation, file kind, continued|crashed)."""

SEEN: Counter[tuple[str, str]] = Counter()
"""File-layer operations performed per (operation, file kind): the pairs that exist."""

PENDING_FIXES: dict[str, str] = {
    # name: what the model tolerates until the engine is fixed. An entry names a
    # relaxation that ``pending(name)`` reports; deleting it makes the generative test
    # enforce the full invariant again.
}
"""Relaxations of the invariants for defects being fixed elsewhere, by name."""

RELAXED: Counter[str] = Counter()
"""How often each :data:`PENDING_FIXES` relaxation was used in the run."""


def pending(name: str) -> bool:
    """True (and counted) while the relaxation ``name`` of :data:`PENDING_FIXES` stands."""
    if name in PENDING_FIXES:
        RELAXED[name] += 1
        return True
    return False


PARTS = ("p-0", "p-1")
APPS = ("qa", "qb")
SUBS = ("s1", "s2")

TARGET_SIZE = 2048
WAL_MAX = 24 * 1024
WAL_FILE = 4096
SIZE_CAP = 48 * 1024
HOUR_NS = 3600 * 10**9

ROW_SIZES = {"one": 1, "small": 7, "near_target": 90, "over_target": 130, "large": 280}
HUGE_ROWS = 3000  # ~3x wal.max_size: can never fit


# -- violations ---------------------------------------------------------------------
class Violation(AssertionError):
    """An invariant of the store does not hold."""


class LostRow(Violation):
    """An acknowledged or committed row is not readable."""


class DuplicateRow(Violation):
    """A row is readable more than once."""


class UndecidedVisible(Violation):
    """A row of an undecided, discarded or refused write is readable."""


class SeqReused(Violation):
    """One (partition, seq) was published with two different contents."""


class Resurrected(Violation):
    """A segment retention deleted (or condemned) is readable again."""


class UnackedDeleted(Violation):
    """A segment vanished that a subscriber had not acknowledged (nor had dropped)."""


class DamageNotContained(Violation):
    """Damage to one file stopped something that does not depend on it."""


class WrongError(Violation):
    """An operation failed with an error the contract does not allow."""


class AppendRaisedAfterDurable(Violation):
    """append() raised although its record was durable: a retry duplicates it."""


class SchemaDecision(Violation):
    """A compatible batch was refused, or an incompatible one accepted."""


class StuckHandle(Violation):
    """After an injected fault cleared, a handle still fails calls that need nothing broken."""


class LiveDiffersFromRecovery(Violation):
    """What a live reader saw after a fault differs from what recovery rebuilds."""


class ExpiredWhileActive(Violation):
    """A subscriber acknowledging or live within ``subscriber.expire_after`` (by the
    storage's clock) was expired (a decision taken on some machine's wall clock)."""


class ReadAgain(Violation):
    """A consumer's batch held a segment its subscriber had acknowledged (before the
    consumer started, or in an earlier batch), or one outside the batch's range: its
    head and backfill cursors (ARCHITECTURE.md §19) read a segment twice."""


class SkippedSegment(Violation):
    """A consumer's acknowledgement recorded a segment done that it never read, or it
    found nothing left to read while a segment published before it started was not done
    for its subscriber: a catch-up order (or a switch of order) skipped it."""


# -- batches ------------------------------------------------------------------------
def _schema(variant: str) -> pa.Schema:
    k_nullable = variant == "nullable"
    fields = [pa.field("k", pa.int64(), nullable=k_nullable)]
    if variant == "dict":
        fields.append(pa.field("v", pa.dictionary(pa.int32(), pa.string())))
    elif variant == "badtype":
        fields.append(pa.field("v", pa.int64()))
    else:
        fields.append(pa.field("v", pa.string()))
    if variant == "newcol":
        fields.append(pa.field("w", pa.int32()))
    schema = pa.schema(fields)
    if variant == "meta":
        schema = schema.with_metadata({"origin": "backfill"})
    return schema


VARIANTS = ("base", "nullable", "dict", "newcol", "badtype", "meta")


def make_batch(variant: str, keys: list[int]) -> pa.RecordBatch:
    schema = _schema(variant)
    cols: list[pa.Array] = [pa.array(keys, type=pa.int64())]
    if variant == "dict":
        cols.append(pa.array([f"r{k % 7}" for k in keys]).dictionary_encode())
    elif variant == "badtype":
        cols.append(pa.array(keys, type=pa.int64()))
    else:
        cols.append(pa.array([f"r{k:08d}" for k in keys], type=pa.string()))
    if variant == "newcol":
        cols.append(pa.array([k % 1000 for k in keys], type=pa.int32()))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def compatible(a: pa.Schema, b: pa.Schema) -> bool:
    """The documented rule: same names and types; nullability and metadata ignored."""
    return a.names == b.names and all(x.type.equals(y.type) for x, y in zip(a, b, strict=True))


# -- model records ------------------------------------------------------------------
# key status: what the store may show of a row
ACKED = "acked"  # must be visible exactly once (once sealed)
PENDING = "pending"  # appended, not yet durable: 0 or 1 times
MAYBE = "maybe"  # may be visible at most once (crash, damage, lost wal.path)
RAISED = "raised"  # append raised under flush_interval=0: must never be visible
TXN = "txn"  # in an undecided transaction: never visible
COMMITTED = "committed"  # like ACKED
DISCARDED = "discarded"  # loser or discarded transaction: never visible
REFUSED = "refused"  # refused before anything was written: never visible
GONE = "gone"  # in a segment retention legitimately deleted: never visible again
LOST = "lost"  # legitimately lost and not visible at a check: never visible again
MUST = (ACKED, COMMITTED)
NEVER = (RAISED, TXN, DISCARDED, REFUSED, GONE, LOST)


@dataclass
class Txn:
    partition: str
    txn_id: int
    app: str
    version: int
    gen: int
    keys: list[int] = field(default_factory=list)
    durable: bool = True
    state: str = "open"  # open | dead (died unflushed) | won | lost | abandoned | gone
    # object root (§10.2): the batches appended, kept as the Spark sink keeps them;
    # staged once flushed (a commit candidate), or its staging failed (a failed task)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    staged: bool = False
    stage_failed: bool = False
    # its staged object was damaged when its machine was lost: its rows cannot be
    # sealed by anyone (a named loss, §22)
    unsealable: bool = False
    # its writer recovered while its staged object was damaged: held pending until the
    # object is repaired or removed (§10.2), which nothing here does
    held: bool = False
    # its machine was lost with its WAL: until sealed, its staged object is the only
    # copy of its rows (a flip of that object then loses them, named)
    wal_lost: bool = False


@dataclass
class Damage:
    kind: str  # wal | state | meta | arrow | acklog | commit
    path: str
    partition: str | None = None
    seq: int | None = None
    app: str | None = None
    version: int | None = None


class Crashed(Exception):
    """An injected fault fired: the harness treats it as the process dying."""


class Faulted(Crashed):
    """An injected fault surfaced to the caller and the process goes on (continue mode).

    A subclass of :class:`Crashed` so that every model update for an uncertain outcome
    applies to both; only the state machine tells them apart (no handle is killed).
    """


class Outage(Exception):
    """The ack log is damaged beyond opening: calls that need it fail naming it."""


@dataclass
class Options:
    flush: str = "group"  # group: acked at flush(); sync: wal.flush_interval=0
    layout: str = "default"  # default | external (wal.path outside the root)
    policy: str | None = None  # None | backpressure | drop_oldest (size cap)
    time_retention: bool = False
    segments: str = "local"  # local | remote (an fsspec faultmem:// location)


def _file_kind(path: str) -> str:
    return file_kind(path)


def _partition_of(path: str) -> str | None:
    parts = path.split(os.sep)
    for i, name in enumerate(parts[:-1]):
        if name in ("partitions", "segments", "local") and parts[i + 1] in PARTS:
            return parts[i + 1]
    return None


FLIP_KINDS = (
    "wal", "state", "meta", "arrow", "acklog", "checkpoint", "commit", "store", "policy",
    "policy-copy", "heartbeat", "lock", "quarantine", "sub", "readers", "metrics",
    "manifest",
)  # fmt: skip
"""Kinds of file the generative test flips a byte in. Not flipped: a directory's
``.objects.lock`` (:data:`~quiver_spark.objects.local.LOCK_NAME`): it holds no bytes
and none are ever read from it; it is only the file whose ``flock`` serializes the
replace, put and delete of that directory's objects (a damaged byte there cannot
exist, and the lock works whatever the file holds)."""

FLIP_OUTCOMES = {
    "manifest": "readers fall back to a listing of the partition (logged, never a crash) and "
    "the next writer open or retention pass rewrites the MANIFEST from a listing "
    "(ARCHITECTURE.md §11.1): nothing is lost or duplicated, and the rewritten "
    "MANIFEST verifies",
}
"""What the store does when a file of a kind added with the root's objects is damaged,
as the flip walk asserts it (the older kinds: ARCHITECTURE.md §22)."""


@dataclass
class CatchUpRun:
    """One live consumer's batches, checked against what its subscriber's ack log held
    when it started (ARCHITECTURE.md §19), and the catch-up states they explored
    (counted in :data:`STATS` under ``catch_up:``)."""

    sub: str
    order: str
    done: set[tuple[str, int]]
    """Segments done for the subscriber when the consumer started."""
    published: set[tuple[str, int]]
    """Segments published when the consumer started."""
    switched_from: str | None = None
    read: set[tuple[str, int]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    drained: bool = False

    @classmethod
    def begin(cls, h: StoreHarness, sub: str, order: str) -> CatchUpRun:
        published = h._listing_quiet()
        reg = h._fresh_registry()
        done = {key for key in set(h.segs) | published if reg.is_done(sub, *key)}
        parts = sorted({p for p, _ in published})
        with h.io.no_faults():
            at = resumed_position(lambda p: reg.hwm(sub, p), lambda p: reg.gaps(sub, p), parts)
        before = h.last_order.get(sub)
        h.last_order[sub] = order
        STATS[f"catch_up:runs:{order}"] += 1
        if at.backlog:  # the ack log holds a head above a backlog (or a nack's neighbours)
            STATS[f"catch_up:starts_with_a_backlog:{order}"] += 1
        switched = before is not None and before != order
        if switched:
            STATS[f"catch_up:switch:{before}->{order}"] += 1
            if at.backlog:
                STATS[f"catch_up:switch_with_a_backlog:{before}->{order}"] += 1
        return cls(sub, order, done, published, before if switched else None)

    def batch(self, b: Batch) -> None:
        """A batch polled: none of its segments read before, each inside its range."""
        for meta in b.segments:
            key = (meta.partition, meta.seq)
            if key in self.done or key in self.read:
                when = "before it started" if key in self.done else "in an earlier batch"
                self.problems.append(
                    f"a live consumer of {self.sub} reading {self.order} first read "
                    f"{key[0]}/{key[1]} again, acknowledged {when} (batch {b.start} -> {b.end})"
                )
            elif b.start.covers(*key) or not b.end.covers(*key):
                self.problems.append(
                    f"a live consumer of {self.sub} read {key[0]}/{key[1]} outside its batch's "
                    f"range {b.start} -> {b.end}"
                )
        started, ended = dict(b.start.backlog), dict(b.end.backlog)
        heads = any(b.end.get(p) > b.start.get(p) for p in b.end.segments)
        if ended and not started:
            STATS["catch_up:backlog_opened"] += 1
        if started and ended != started:
            STATS["catch_up:backfill_batches"] += 1
            if heads:
                STATS["catch_up:head_and_backfill_in_one_batch"] += 1
            if not ended:
                STATS["catch_up:backlog_closed"] += 1
        if started and ended == started and heads:
            STATS["catch_up:head_only_beside_a_backlog"] += 1

    def acked(self, b: Batch) -> None:
        self.read.update((meta.partition, meta.seq) for meta in b.segments)

    def check_nothing_skipped(self, reg: Any, kept: set[tuple[str, int]] | None) -> None:
        """After a run without faults or damage: every segment published before it (and
        in ``kept``, the segments still published, when retention may drop unread ones)
        that it recorded done, it read; and when it found nothing left to read, every
        one of them is done."""
        candidates = self.published if kept is None else self.published & kept
        unread = sorted(k for k in candidates - self.done - self.read if reg.is_done(self.sub, *k))
        if unread:
            raise SkippedSegment(
                f"a live consumer of {self.sub} reading {self.order} first recorded {unread} "
                "done without reading them"
            )
        if not self.drained:
            return
        left = sorted(k for k in self.published if not reg.is_done(self.sub, *k))
        if left:
            raise SkippedSegment(
                f"a live consumer of {self.sub} reading {self.order} first found nothing "
                f"left while {left} (published before it started) were not done for it "
                f"(its last order: {self.switched_from or self.order})"
            )
        STATS["catch_up:drained_checks"] += 1


RETRIES = 3
"""Calls a handle may need, once a fault cleared, before it must work again."""


class StoreHarness:
    """One store, its handles and the model (see module docstring)."""

    def __init__(self, base: str, opts: Options | None = None) -> None:
        self.opts = opts or Options()
        self.base = os.path.abspath(base)
        self.root = self._make_root()
        self.wal_path = self._wal_path()
        self.io = FaultyIO(record_data=True)
        self.sim = CrashSimulator.snapshot(self.base)
        flush_s = 0.0 if self.opts.flush == "sync" else 3600.0
        policy = (
            SizeCapPolicy.DROP_OLDEST
            if self.opts.policy == "drop_oldest"
            else SizeCapPolicy.BACKPRESSURE
        )
        hours = 1.0 if self.opts.time_retention else None
        wal = WalConfig(
            flush_interval_s=flush_s,
            max_size_bytes=WAL_MAX,
            file_size_bytes=WAL_FILE,
            path=self.wal_path,
        )
        seg_url = None
        if self.opts.segments == "remote":
            FaultyMemoryFS.io = self.io  # remote requests fail like local I/O
            seg_url = f"faultmem://seg-{uuid.uuid4().hex}"
        seg = SegmentConfig(target_size_bytes=TARGET_SIZE, max_open_duration_s=0.001, path=seg_url)
        # one policy for every handle: the store records it at creation (POLICY)
        self.cfg = StoreConfig(
            wal=wal,
            segment=seg,
            retention=RetentionConfig(
                size_cap_bytes=SIZE_CAP if self.opts.policy else None,
                size_cap_policy=policy,
                max_age_hours=hours,
                backpressure_timeout_s=0.05,
            ),
            ack_checkpoint_records=9,
        )
        self.writers: dict[str, QuiverStore | None] = dict.fromkeys(PARTS)
        self.gen: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.damaged_parts: set[str] = set()
        self.damage: list[Damage] = []
        self.registry_broken = False
        self.reader: QuiverStore | None = None
        # model
        self.next_key = 1
        self.status: dict[int, str] = {}
        self.key_part: dict[int, str] = {}
        self.unflushed: dict[str, list[int]] = {p: [] for p in PARTS}
        self.txns: list[Txn] = []
        self.version = dict.fromkeys(APPS, 0)
        self.abandoned: dict[str, list[int]] = {a: [] for a in APPS}
        self.store_schema: pa.Schema | None = None
        self.segs: dict[tuple[str, int], tuple[int, frozenset[int]]] = {}
        self.live: set[tuple[str, int]] = set()
        self.deleted: set[tuple[str, int]] = set()
        self.subs: dict[str, set[tuple[str, int]]] = {}
        self.last_order: dict[str, str] = {}  # each subscriber's last live consumer's order
        self.drop_window = self.opts.policy == "drop_oldest"
        self.uncertain_subs: set[str] = set()
        self.uncertain_acks: list[tuple[str, list[tuple[str, int]]]] = []
        self.rule = "start"  # the state machine's current rule (per-rule figures)
        self.fault_rule = "start"  # the rule whose continued fault awaits its live check
        self.cont = False  # faults armed now surface and the process goes on
        self.retries = 0  # how often a faulted call is retried at once
        self.live_due = False  # a continued fault awaits its live check
        self.lost_live: set[int] = set()  # rows a live check found absent (must stay so)
        self.manifest_damaged: set[str] = set()  # partitions whose MANIFEST was ever damaged
        self.fault_hits: set[tuple[str, str]] = set()  # (partition, file kind) a fault hit
        self._open_reader()
        for p in PARTS:
            self._open_writer(p)
        STATS["sequences"] += 1

    # -- handles -----------------------------------------------------------------------
    def _make_root(self) -> str:
        root = os.path.join(self.base, "store")
        os.makedirs(root, exist_ok=True)
        return root

    def _wal_path(self) -> str | None:
        return os.path.join(self.base, "local") if self.opts.layout == "external" else None

    def _open_reader(self) -> None:
        self.reader = QuiverStore.open(
            self.root, self.cfg, partition=None, io=self.io, background=False
        )

    def _open_writer(self, p: str) -> None:
        self.writers[p] = QuiverStore.open(
            self.root, self.cfg, partition=p, io=self.io, background=False
        )
        self.gen[p] += 1
        STATS["writer_opens"] += 1

    @staticmethod
    def _kill_handle(store: QuiverStore | None) -> None:
        """Abandon a handle as a dying process would: no flush, no finalize, locks freed."""
        if store is None:
            return
        store._closed = True
        store._maint_stop.set()
        w = store.writer
        if w is not None:
            wal = getattr(w, "wal", None)
            if wal is not None:
                wal._stop.set()
                if wal._flusher is not None:
                    wal._flusher.join()
                fd, wal._fd = wal._fd, None
                if fd is not None:
                    os.close(fd)
                wal._closed = True
            w.life.close()
            w._flock.release()
        if store._subscribers is not None:
            store._subscribers.close()

    def restart_writer(self, p: str, clean: bool = True) -> None:
        """The writer process of ``p`` ends (cleanly, or it dies) and a new one opens."""
        store = self.writers[p]
        assert store is not None
        try:
            if clean:
                self._engine(f"close {p}", store.close)
        finally:
            self.kill(p)  # a closed handle is never used again, even if close raised
        self.start_writer(p)

    def create_with_fault(self, op: str, kind: str, err: int, cont: bool) -> None:
        """A new store is created (its STORE, POLICY, directories) while ``op`` on a file
        of ``kind`` fails once; the creator fails, then it (or a new process) tries again:
        the store must open, take rows and return them (no half-made store is refused)."""
        root = os.path.join(self.base, "fresh", uuid.uuid4().hex[:8])
        cfg = dataclasses.replace(
            self.cfg,
            wal=dataclasses.replace(self.cfg.wal, path=None),
            segment=dataclasses.replace(self.cfg.segment, path=None),
        )
        io = FaultyIO()
        io.fail(op, 1, err, kind=kind)

        def first() -> None:
            # the first append records the schema in STORE (a replace of STORE)
            store = QuiverStore.open(root, cfg, partition="p-0", io=io, background=False)
            try:
                store.append(make_batch("base", [0]))
                store.flush()
            finally:
                store.close()

        try:
            first()
        except (QuiverError, OSError) as e:
            if not any(f.fired for f in io.faults):
                raise WrongError(f"creating a store failed without a fault: {e}") from e
        fired = sum(f.fired for f in io.faults)
        if fired:
            FIRED[op, kind, "continued" if cont else "crashed"] += fired
            STATS["faults_fired"] += fired
            STATS["faults_continued" if cont else "faults_crashed"] += fired
        io.faults.clear()
        try:
            store = QuiverStore.open(root, cfg, partition="p-0", io=io, background=False)
            try:
                store.append(make_batch("base", [1, 2, 3]))
                store.flush()
                store.finalize()
                rows = sorted(k for b in store.scan() for k in b.column("k").to_pylist())
            finally:
                store.close()
        except QuiverError as e:
            raise StuckHandle(
                f"a store whose creation failed at {op} on {kind} ({errno_mod.errorcode[err]}) "
                f"does not open again once the fault cleared: {type(e).__name__}: {e}"
            ) from e
        if [k for k in rows if k != 0] != [1, 2, 3] or rows.count(0) > 1:
            # the first creator's row 0 may or may not have been written, at most once
            raise LostRow(f"a store created after a failed creation returns {rows}, not [1, 2, 3]")
        shutil.rmtree(root, ignore_errors=True)
        STATS["creations_with_fault"] += 1

    def start_writer(self, p: str) -> None:
        """A writer process for ``p`` opens (recovery)."""
        try:
            self._engine(f"open {p}", lambda: self._open_writer(p))
        except (WrongError, DamageNotContained) as e:
            if not isinstance(e.__cause__, QuiverError):
                raise
            self._open_failed(p, e.__cause__)  # damage found by this open: named, contained

    def live_writers(self) -> list[str]:
        return [p for p in PARTS if self.writers[p] is not None]

    def kill(self, p: str) -> None:
        """The writer process of ``p`` dies (kill -9): unflushed rows may or may not survive."""
        self._kill_handle(self.writers[p])
        self.writers[p] = None
        for k in self.unflushed[p]:
            if self.status[k] == PENDING:
                self.status[k] = MAYBE
        self.unflushed[p] = []
        for t in self.txns:
            if t.partition == p and t.state == "open" and not t.durable:
                t.state = "dead"
        STATS["kills"] += 1

    def kill_all(self) -> None:
        for p in PARTS:
            if self.writers[p] is not None:
                self.kill(p)
        self._kill_handle(self.reader)
        self.reader = None

    def close(self) -> None:
        SEEN.update(self.io.pairs)
        self.io.pairs.clear()
        for p in PARTS:
            self._kill_handle(self.writers[p])
        self._kill_handle(self.reader)

    # -- the engine boundary ---------------------------------------------------------------
    def _fired(self) -> int:
        return sum(f.fired for f in self.io.faults)

    def any_fired(self) -> bool:
        """An armed fault fired and was not yet taken into account."""
        return any(f.fired for f in self.io.faults)

    def _engine(self, what: str, fn: Any, refusals: tuple[type[BaseException], ...] = ()) -> Any:
        """Run ``fn``; a fired fault becomes :class:`Crashed`, anything else unexpected a
        :class:`Violation`. Returns ``(result, refusal)``."""
        before = self._fired()
        try:
            return fn(), None
        except Exception as e:
            if self.cont and self._fired() > before and isinstance(e, (QuiverError, OSError)):
                return self._continue(what, fn, refusals, e)
            fired = self._fired() > before
            # a fault fired earlier in a background thread (the WAL's group flusher)
            # surfaces at the next call on that writer: the same crash
            if not fired and self._fired() and isinstance(e, WalFailedError):
                fired = True
            if fired:
                if not isinstance(e, (QuiverError, OSError)):
                    raise WrongError(
                        f"{what}: an injected I/O fault surfaced as {type(e).__name__}: {e}"
                    ) from e
                raise (Faulted if self.cont else Crashed)(what) from e
            if refusals and isinstance(e, refusals):
                return None, e
            if isinstance(e, Violation):
                raise
            if self._metrics_damage_failed(e):
                raise Outage(what) from e
            if self.live_due and isinstance(e, (QuiverError, OSError)):
                # the error of a fault that surfaced earlier, before its live check:
                # the handle has RETRIES calls after the fault cleared to work again
                raise Faulted(what) from e
            acklog_damaged = any(d.kind in ("acklog", "checkpoint") for d in self.damage)
            if (
                isinstance(e, QuiverError)
                and acklog_damaged
                and any(
                    d.kind in ("acklog", "checkpoint") and os.path.basename(d.path) in str(e)
                    for d in self.damage
                )
            ):
                # the ack log is refused naming the damaged file (found by a later
                # read, not the first reopen): the store-wide registry is out
                self.registry_broken = True
                raise Outage(what) from e
            if (
                acklog_damaged
                and isinstance(e, SubscriberError)
                and "unknown subscriber" in str(e)
                and pending("acklog-flip-cuts-registration")
            ):
                # damage cut the ack log back before a registration: the model follows
                # the registry (the subscriber starts over: redelivery, never loss)
                for sub in list(self.subs):
                    if f"'{sub}'" in str(e):
                        del self.subs[sub]
                raise Outage(what) from e
            if self.damage and isinstance(e, QuiverError):
                raise DamageNotContained(
                    f"{what} failed because of damage elsewhere ({[d.path for d in self.damage]}): "
                    f"{type(e).__name__}: {e}"
                ) from e
            raise WrongError(f"{what} raised {type(e).__name__}: {e}") from e

    def _fresh_registry(self) -> Any:
        """The maintenance handle's registry, caught up with the ack log."""
        with self.io.no_faults():
            return self._fresh_registry_quiet()

    def _fresh_registry_quiet(self) -> Any:
        assert self.reader is not None
        try:
            reg = self.reader.subscribers
            reg.refresh()
            return reg
        except StoreClosedError as e:
            if not pending("acklog-write-closes-registry"):
                raise StuckHandle(f"the registry stays closed after a fault: {e}") from e
        self._kill_handle(self.reader)
        self._open_reader()
        reg = self.reader.subscribers
        reg.refresh()
        return reg

    def _metrics_damage_failed(self, e: BaseException) -> bool:
        """A damaged metrics file failed an operation that does not need it (a known
        defect, :data:`PENDING_FIXES`): the operator removes the file."""
        damaged = [d for d in self.damage if d.kind == "metrics"]
        tb = e.__traceback__
        through_metrics = False
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.endswith(os.path.join("quiver_spark", "metrics.py")):
                through_metrics = True
            tb = tb.tb_next
        if not (damaged and through_metrics and pending("metrics-damage-fails-acks")):
            return False
        for d in damaged:
            if os.path.exists(d.path):
                os.unlink(d.path)
            self.damage.remove(d)
        return True

    def _continue(
        self,
        what: str,
        fn: Any,
        refusals: tuple[type[BaseException], ...],
        first: BaseException,
    ) -> Any:
        """A fault surfaced and the process goes on: retry the same call ``self.retries``
        times (a sticky ENOSPC may still fail them); the last failure raises Faulted."""
        self._note_fired(continued=True)
        err: BaseException = first
        for _ in range(self.retries):
            before = self._fired()
            try:
                out = fn()
            except Exception as e:
                if self._fired() > before and isinstance(e, (QuiverError, OSError)):
                    self._note_fired(continued=True)
                    err = e
                    continue
                if refusals and isinstance(e, refusals):
                    return None, e
                if isinstance(e, (QuiverError, OSError)):
                    err = e  # the handle may need a few calls: judged by the live check
                    continue
                raise WrongError(f"{what}: retried, raised {type(e).__name__}: {e}") from e
            STATS["retries_succeeded"] += 1
            return out, None
        raise Faulted(what) from err

    # -- faults ------------------------------------------------------------------------------
    def arm(
        self,
        op: str,
        at: int,
        err: int,
        partial: bool,
        path: str | None,
        *,
        kind: str | None = None,
        cont: bool = False,
        sticky_for: int | None = None,
        retries: int = 0,
    ) -> None:
        """Fail the ``at``-th ``op`` (on a path containing ``path``, of file ``kind``)
        from now on; ``cont``: the error surfaces and the process goes on (retrying the
        call ``retries`` times); ``sticky_for``: the fault keeps firing that many times
        (a full disk that frees up later)."""
        if self.io.faults and cont != self.cont:
            self.io.faults.clear()  # one mode at a time
        self.cont = cont
        self.retries = retries
        self.io.fail(
            op,
            at,
            err,
            partial=partial,
            path_contains=path,
            kind=kind,
            sticky=sticky_for is not None,
            sticky_for=sticky_for,
        )
        STATS["faults_armed"] += 1
        STATS["faults_armed_continue" if cont else "faults_armed_crash"] += 1

    def active_faults(self) -> bool:
        """An armed fault may still fire (not yet reached, or a sticky one not cleared)."""
        return any(not f.done for f in self.io.faults)

    def _failed_ops(self) -> list[Any]:
        return [t for t in self.io.trace if t.failed]

    def _note_fired(self, continued: bool = False) -> None:
        partial = any(f.partial for f in self.io.faults if f.fired)
        mode = "continued" if continued else "crashed"
        for t in self._failed_ops():
            if getattr(t, "noted", False):
                continue
            t.noted = True  # type: ignore[attr-defined]
            kind = _file_kind(t.path)
            FAULT_POINTS.add((t.op, kind, errno_mod.errorcode.get(t.errno or 0, "?"), partial))
            FIRED[t.op, kind, mode] += 1
            part = _partition_of(t.path)
            if part is not None:
                self.fault_hits.add((part, kind))
            STATS["faults_fired"] += 1
            STATS[f"faults_{mode}"] += 1
        if continued:
            self.live_due = True
            self.fault_rule = self.rule
            self.io.faults[:] = [f for f in self.io.faults if not f.done]
        else:
            self.io.faults.clear()

    def _write_failed(self, p: str) -> None:
        """A write or flush of ``p`` raised and the process goes on: its unflushed rows
        were not acknowledged (the caller resends them), and its undecided transactions
        not yet flushed belong to a failed task, never committed."""
        for k in self.unflushed[p]:
            if self.status[k] == PENDING:
                self.status[k] = MAYBE
        self.unflushed[p] = []
        for t in self.txns:
            if t.partition == p and t.state == "open" and not t.durable:
                t.state = "dead"

    def faulted_parts(self, kind: str | None = None) -> set[str]:
        """Partitions a fault hit since the sequence began (on files of ``kind``)."""
        return {p for p, k in self.fault_hits if kind is None or k == kind}

    def swallowed_fault(self) -> None:
        """A fault fired inside a call that did not raise (best-effort work caught it)."""
        if self.cont:
            self._note_fired(continued=True)
        else:
            self.crashed()

    def continued(self) -> None:
        """A call raised an injected fault and the process goes on: the model already
        holds the uncertain outcome; open transactions of a writer whose write failed
        are failed tasks (never committed)."""
        self._note_fired(continued=True)

    def live_check(self) -> None:
        """After a continued fault cleared: the same handles work again within
        :data:`RETRIES` calls, and a live reader sees every acknowledged row once,
        nothing undecided, nothing unacknowledged deleted."""
        if self.active_faults():
            return
        self.io.faults.clear()
        self.live_due = False
        self.cont = False
        if self.reader is None:
            return
        for p in self.live_writers():
            store = self.writers[p]
            assert store is not None
            for what in ("append", "flush", "maintain", "finalize"):
                fn = (lambda p=p: self._probe_append(p)) if what == "append" else None
                self._until_works(
                    f"{what} {p} after the fault cleared", fn or getattr(store, what), p
                )
                store = self.writers[p]
                assert store is not None
            self.unflushed[p] = []
        if not self.registry_broken:
            reader = self.reader
            self._until_works(
                "the registry after the fault cleared", lambda: reader.subscribers.refresh()
            )
        self._sync_subscribers()
        parts = {p for p in self.live_writers() if p not in self.damaged_parts}
        visible = self.observe()
        self._compare(visible, parts=parts, live=True)
        STATS["live_checks"] += 1
        STATS[f"live_checks:{self.fault_rule}"] += 1

    def _probe_append(self, p: str) -> None:
        """One row of a schema the store takes (a write must work again, not only reads)."""
        self.append_compatible(p, 1)

    def append_compatible(self, p: str, n: int) -> None:
        """``n`` rows in a schema the store takes."""
        self._expect_schema("base")
        variant = next(
            (
                v
                for v in VARIANTS
                if self.store_schema is None or compatible(self.store_schema, _schema(v))
            ),
            "base",
        )
        self.append(p, variant, n)

    def _until_works(self, what: str, fn: Any, p: str | None = None) -> None:
        last: BaseException | None = None
        for _ in range(RETRIES):
            try:
                self._engine(what, fn)
                return
            except Outage:
                return
            except (WrongError, DamageNotContained) as e:
                last = e.__cause__ or e
                if not isinstance(last, QuiverError):
                    raise
        if isinstance(last, StoreClosedError) and pending("acklog-write-closes-registry"):
            self._kill_handle(self.reader)
            self._open_reader()
            return
        if (
            p is not None
            and isinstance(last, WalFailedError)
            and pending("wal-failure-needs-reopen")
        ):
            self.kill(p)
            try:
                self._open_writer(p)
            except Exception as e:
                self._open_failed(p, e)
                return
            store = self.writers[p]
            assert store is not None
            name = what.split()[0]
            probe = (lambda: self._probe_append(p)) if name == "append" else getattr(store, name)
            self._until_works(what, probe)
            return
        raise StuckHandle(
            f"{what}: still fails after {RETRIES} calls with no fault armed: "
            f"{type(last).__name__}: {last}"
        ) from last

    def crashed(self) -> None:
        """A fault fired: every handle of the process dies; reopen and check."""
        self._note_fired()
        self.kill_all()
        self.recover_and_check()

    # -- writes --------------------------------------------------------------------------------
    def _keys(self, n: int, p: str, status: str) -> list[int]:
        keys = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        for k in keys:
            self.status[k] = status
            self.key_part[k] = p
        return keys

    def _expect_schema(self, variant: str) -> bool:
        if self.store_schema is None and self.reader is not None:
            with self.io.no_faults():  # the test's own look, not the workload
                self.store_schema = self.reader.schema()
        return self.store_schema is None or compatible(self.store_schema, _schema(variant))

    def _append(self, p: str, variant: str, n: int, txn: Txn | None) -> None:
        store = self.writers[p]
        assert store is not None
        expect_ok = self._expect_schema(variant)
        huge = n >= HUGE_ROWS
        keys = self._keys(n, p, TXN if txn else PENDING)
        batch = make_batch(variant, keys)
        sync = self.opts.flush == "sync"
        refusals: tuple[type[BaseException], ...] = (SchemaMismatchError, StoreAtCapacityError)
        if huge:
            refusals = (QuiverError,)
        try:
            _, refusal = self._engine(
                f"append {n} rows ({variant}) to {p}",
                lambda: store.append(batch, txn_id=txn.txn_id if txn else 0),
                refusals,
            )
        except Crashed:
            wal_fault = any(
                t.op in ("write", "fsync") and "/wal/" in t.path for t in self._failed_ops()
            )
            for k in keys:
                if txn is not None:
                    self.status[k] = TXN
                elif sync and not wal_fault:
                    self.status[k] = RAISED
                else:
                    self.status[k] = MAYBE
            if txn is not None:
                txn.keys.extend(keys)
                txn.durable = False
            self._write_failed(p)
            raise
        except Outage:
            for k in keys:
                self.status[k] = RAISED if sync and txn is None else (TXN if txn else MAYBE)
            if txn is not None:
                txn.keys.extend(keys)
                txn.durable = False
            return
        except Violation:
            for k in keys:
                self.status[k] = MAYBE if txn is None and not sync else RAISED
            raise
        if refusal is not None:
            for k in keys:
                self.status[k] = REFUSED
            STATS[f"refused:{type(refusal).__name__}"] += 1
            if isinstance(refusal, SchemaMismatchError) and expect_ok:
                raise SchemaDecision(f"compatible batch ({variant}) refused: {refusal}")
            if huge and getattr(refusal, "retryable", False):
                raise WrongError(
                    f"a batch of {batch.nbytes} bytes can never fit in wal.max_size={WAL_MAX} "
                    f"but was refused as retryable: {type(refusal).__name__}: {refusal}"
                )
            return
        if not expect_ok:
            raise SchemaDecision(
                f"incompatible batch ({variant}: {_schema(variant)}) accepted by a store "
                f"whose schema is {self.store_schema}"
            )
        if self.store_schema is None:
            self.store_schema = _schema(variant)
        STATS["appends"] += 1
        if txn is not None:
            txn.keys.extend(keys)
            if not sync:
                txn.durable = False
            return
        if sync:
            for k in keys:
                self.status[k] = ACKED
        else:
            self.unflushed[p].extend(keys)

    def append_compatible_everywhere(self) -> None:
        """A segment's worth of rows in every live partition, sealed."""
        for p in self.live_writers():
            if self.writers[p] is not None:
                self.append_compatible(p, 90)
            if self.writers[p] is not None:
                self.flush(p)
            if self.writers[p] is not None:
                self.finalize(p)

    def append(self, p: str, variant: str, n: int) -> None:
        self._append(p, variant, n, None)

    def flush(self, p: str) -> None:
        store = self.writers[p]
        assert store is not None
        try:
            self._engine(f"flush {p}", store.flush)
        except Crashed:
            self._write_failed(p)
            raise
        for k in self.unflushed[p]:
            if self.status[k] == PENDING:
                self.status[k] = ACKED
        self.unflushed[p] = []
        for t in self.txns:
            if t.partition == p and t.state == "open" and t.gen == self.gen[p]:
                t.durable = True
        STATS["flushes"] += 1

    def begin(self, p: str, app: str) -> Txn:
        store = self.writers[p]
        assert store is not None
        v = self.version[app]
        tag = f"{p}.{len(self.txns)}"
        try:
            txn_id, _ = self._engine(
                f"begin_txn {app}/{v} on {p}", lambda: store.begin_txn(app, v, tag)
            )
        except Crashed:
            raise
        t = Txn(p, txn_id, app, v, self.gen[p], durable=self.opts.flush == "sync")
        self.txns.append(t)
        STATS["txns_begun"] += 1
        return t

    def open_txns(self, p: str | None = None) -> list[Txn]:
        return [
            t
            for t in self.txns
            if t.state == "open"
            and (p is None or t.partition == p)
            and self.writers[t.partition] is not None
            and t.gen == self.gen[t.partition]
        ]

    def txn_append(self, t: Txn, variant: str, n: int) -> None:
        self._append(t.partition, variant, n, t)

    def candidates(self, app: str) -> list[Txn]:
        """Transactions of the app's current batch that may win (flushed, still there)."""
        v = self.version[app]
        return [
            t
            for t in self.txns
            if t.app == app
            and t.version == v
            and t.state == "open"
            and t.durable
            and t.partition not in self.damaged_parts
        ]

    def commit(self, app: str, winners: list[Txn]) -> None:
        """The driver decides batch ``(app, version)``: winners' rows become committed."""
        v = self.version[app]
        assert self.reader is not None
        reader = self.reader
        names = [(t.partition, t.txn_id) for t in winners]
        rows = sum(len(t.keys) for t in winners)
        try:
            self._engine(f"commit {app}/{v}", lambda: reader.commit_txn(app, v, names, rows))
        except Crashed:
            # the decision may or may not have reached the disk
            for t in winners:
                for k in t.keys:
                    if self.status[k] == TXN:
                        self.status[k] = MAYBE
            for t in self.txns:
                if t.app == app and t.version == v and t.state in ("open", "dead"):
                    t.state = "abandoned"
            self.abandoned[app].append(v)
            self.version[app] = v + 1
            raise
        for t in self.txns:
            if t.app != app or t.version != v:
                continue
            win = t in winners
            t.state = "won" if win else "lost"
            for k in t.keys:
                if self.status[k] == TXN:
                    self.status[k] = COMMITTED if win else DISCARDED
        self.version[app] = v + 1
        STATS["commits"] += 1

    def abandon(self, app: str) -> None:
        """The query moves on without deciding its batch (abandoned checkpoint)."""
        v = self.version[app]
        for t in self.txns:
            if t.app == app and t.version == v and t.state in ("open", "dead"):
                t.state = "abandoned"
        self.abandoned[app].append(v)
        self.version[app] = v + 1
        STATS["abandoned"] += 1

    def discard_abandoned(self, app: str) -> None:
        """``quiver txns discard APP``: an empty decision for each abandoned batch."""
        assert self.reader is not None
        reader = self.reader
        for v in self.abandoned[app]:
            mine = f"{app}/{v:020d}.commit"
            try:
                self._engine(f"discard {app}/{v}", lambda v=v: reader.commit_txn(app, v, [], 0))
            except DamageNotContained as e:
                # the batch's own decision file is the damaged one: refusing to decide
                # again, naming it, is the contract (its rows stay undecided: maybe)
                if not any(d.path.endswith(mine) and d.path in str(e) for d in self.damage):
                    raise
                for t in self.txns:
                    if t.app == app and t.version == v:
                        for k in t.keys:
                            if self.status[k] == TXN:
                                self.status[k] = MAYBE
                continue
            for t in self.txns:
                if t.app == app and t.version == v:
                    t.state = "lost"
                    for k in t.keys:
                        if self.status[k] == TXN:
                            self.status[k] = DISCARDED
        self.abandoned[app] = []
        STATS["discards"] += 1

    def finalize(self, p: str) -> None:
        store = self.writers[p]
        assert store is not None
        self._engine(f"finalize {p}", store.finalize)
        STATS["finalizes"] += 1

    def maintain(self, p: str) -> None:
        store = self.writers[p]
        assert store is not None
        self._engine(f"maintain {p}", store.maintain)
        STATS["maintains"] += 1

    # -- subscribers and retention ---------------------------------------------------------
    def register(self, sub: str) -> None:
        if sub in self.subs or self.registry_broken:
            return
        assert self.reader is not None
        reader = self.reader

        def start() -> None:
            # a consumer's first start: the registration, its .sub record and the
            # readers/ lock (ARCHITECTURE.md §13.8)
            consumer = Subscription(reader, sub, live=True)
            try:
                consumer.start()
            finally:
                consumer.close()

        try:
            self._engine(f"register {sub}", start)
        except Crashed:
            self.uncertain_subs.add(sub)
            raise
        # segments retention deleted before the registration count as done for it (§13.4):
        # the model sees a deletion only at its next observation, maybe after this
        reg = reader.subscribers
        self.subs[sub] = {key for key in self.segs if reg.is_done(sub, *key)}
        STATS["registers"] += 1

    def ack(self, sub: str, count: int, outcome: str = "ack") -> None:
        """``sub`` reads up to ``count`` segments it has not acknowledged, then records them."""
        if sub not in self.subs or self.registry_broken:
            return
        self.observe()
        todo = sorted(
            s for s in self.live if s not in self.subs[sub] and not self._damaged_seg(*s)
        )[:count]
        if not todo:
            return
        assert self.reader is not None
        with self.io.no_faults():
            reg = self.reader.subscribers
        by_part: dict[str, list[int]] = {}
        for p, seq in todo:
            by_part.setdefault(p, []).append(seq)
        out = Outcome.ACK if outcome == "ack" else Outcome.NACK
        try:
            self._engine(
                f"record {outcome} {sub} {by_part}", lambda: reg.record_many(sub, by_part, out)
            )
        except Crashed:
            if out is Outcome.ACK:
                self.uncertain_acks.append((sub, todo))
            raise
        if out is Outcome.ACK:
            self.subs[sub].update(todo)
        STATS[f"subscriber_{outcome}s"] += 1

    def consume_live(
        self,
        sub: str,
        batches: int = 2,
        order: str = "oldest",
        share: float | None = None,
        cap: int | None = None,
    ) -> None:
        """``sub``'s live consumer (a :class:`Subscription`, as a streaming query holds it)
        polls, reads and acknowledges up to ``batches`` batches, then stops: its record,
        its lock, remote segment reads, and the lost log of the segments it skips
        (``failOnDataLoss=false``: a damaged segment is skipped and logged). It reads in
        the catch-up ``order`` (ARCHITECTURE.md §19; ``share``: its head share newest
        first) at most ``cap`` segments a batch, and is checked against the ack log
        (:class:`CatchUpRun`): no segment read again once acknowledged, whatever the
        order it switched from, and when it found nothing left to read, every segment
        published before it started is done."""
        if sub not in self.subs or self.registry_broken or self.reader is None:
            return
        self.observe()
        reader = self.reader
        seen: list[int] = []
        run = CatchUpRun.begin(self, sub, order)
        fired0 = self._fired()

        def consume() -> None:
            consumer = Subscription(
                reader, sub, live=True, fail_on_data_loss=False, order=order, head_share=share
            )

            def poll() -> Batch | None:
                return consumer.poll() if cap is None else consumer.poll(Caps(max_segments=cap))

            try:
                for _ in range(batches):
                    batch = poll()
                    if batch is None:
                        # a new consumer's first plan may reuse the handle's view of a
                        # partition taken a moment ago: the next poll sees what was
                        # published since (planning.FIRST_VIEW_REUSE_S)
                        batch = poll()
                    if batch is None:
                        run.drained = True
                        return
                    run.batch(batch)
                    for meta in batch.segments:
                        for b in consumer.read(meta):
                            seen.extend(b.column("k").to_pylist())
                    consumer.ack(batch.end)
                    run.acked(batch)
            finally:
                consumer.close()

        try:
            self._engine(f"live consumer {sub} ({order} first)", consume)
        except Crashed:
            self.uncertain_acks.append((sub, sorted(self.segs)))
            raise
        finally:
            bad = sorted(k for k in seen if self.status.get(k) in (RAISED, TXN, DISCARDED, REFUSED))
            if bad:
                raise UndecidedVisible(
                    f"a live consumer of {sub} read rows that must never be visible: "
                    f"{_span(bad)} ({self._describe(bad)})"
                )
            if run.problems:
                raise ReadAgain("; ".join(run.problems))
        if sub in self.subs:
            reg = self._fresh_registry()
            self.subs[sub].update(key for key in self.segs if reg.is_done(sub, *key))
            if not self.damage and self._fired() == fired0 and not self.cont:
                # segments a retention pass may have dropped unread are left out
                kept = self._listing_quiet() if self.drop_window else None
                run.check_nothing_skipped(reg, kept)
        STATS["live_consumer_runs"] += 1

    def deregister(self, sub: str) -> None:
        """``quiver subscribers PATH remove NAME``: the subscriber and its record go (what
        it had not acknowledged is no longer kept for it)."""
        if sub not in self.subs or self.registry_broken or self.reader is None:
            return
        from click.testing import CliRunner

        from quiver_spark.cli import cli

        self.observe()
        with self.io.no_faults():  # the operator's command, not the workload under test
            res = CliRunner().invoke(cli, ["subscribers", self.root, "remove", sub])
        if res.exit_code != 0:
            raise WrongError(f"quiver subscribers remove {sub} failed: {res.output}")
        del self.subs[sub]
        self.uncertain_acks = [(s, keys) for s, keys in self.uncertain_acks if s != sub]
        self.uncertain_subs.discard(sub)
        STATS["deregisters"] += 1

    def tear_tail(self, kind: str, p: str = "p-0") -> bool:
        """The process appending to the last WAL file of ``p`` (``wal``) or to the last
        ack log (``acklog``) dies in the middle of a write: half a record ends the file.
        Its handles are gone; the next opener cuts the torn tail (§4.2, §13.6). The test's
        view of the disk starts again from here (the torn bytes are not in the trace)."""
        if kind == "wal":
            if self.writers[p] is None or p in self.damaged_parts:
                return False
            self.kill(p)
            files = [
                os.path.join(d, n)
                for d, _, names in os.walk(self.base)
                for n in names
                if n.endswith(".wal") and _partition_of(os.path.join(d, n)) == p
            ]
        else:
            if self.reader is None or self.registry_broken:
                return False
            self.kill_all()
            files = [
                os.path.join(d, n)
                for d, _, names in os.walk(self.root)
                for n in names
                if file_kind(os.path.join(d, n)) == "acklog"
            ]
        files = [f for f in files if os.path.getsize(f) > 0]
        if not files:
            return False
        last = max(files, key=lambda f: os.path.basename(f))
        with open(last, "rb") as f:
            data = f.read()
        with open(last, "ab") as f:  # a record's first bytes: its frame is incomplete
            f.write(data[-24:-12] if len(data) >= 24 else b"\0" * 7)
        self._trace_done()
        self.sim = CrashSimulator.snapshot(self.base)
        STATS[f"torn_tails:{kind}"] += 1
        return True

    def retention(self, expire: bool, via_gc: bool) -> None:
        """One retention pass of the maintenance handle (or ``quiver gc``'s engine function)."""
        if self.registry_broken and not self.subs:
            pass
        self.observe()
        assert self.reader is not None
        reader = self.reader
        now = time.time_ns() + (2 * HOUR_NS if expire else 0)
        if self.opts.policy == "drop_oldest" or (expire and self.opts.time_retention):
            self.drop_window = True
        if via_gc:
            from quiver_spark.cli.gc import run_gc

            self._engine("quiver gc", lambda: run_gc(reader, dry_run=False, now_ns=now))
            STATS["gc_runs"] += 1
        else:
            self._engine("run_retention", lambda: reader.run_retention(now_ns=now))
            STATS["retention_runs"] += 1
        self.observe()

    # -- observation -------------------------------------------------------------------------
    def _damaged_seg(self, p: str, seq: int) -> bool:
        return any(
            d.kind in ("meta", "arrow") and (d.partition, d.seq) == (p, seq) for d in self.damage
        )

    def _damage_named(self, e: BaseException) -> bool:
        text = str(e) + " " + str(getattr(e, "path", ""))
        return any(os.path.basename(d.path) in text for d in self.damage)

    def _listing(self) -> dict[str, list[int]]:
        assert self.reader is not None
        loc = self.reader.segment_location
        return {p: loc.published_seqs(p) for p in loc.partitions()}

    def observe(self) -> Counter[int]:
        """Read every published segment; update the seq map; check vanished segments."""
        with self.io.no_faults():
            return self._observe()

    def _observe(self) -> Counter[int]:
        assert self.reader is not None
        loc = self.reader.segment_location
        visible: Counter[int] = Counter()
        now_live: set[tuple[str, int]] = set()
        for p, seqs in self._listing().items():
            for seq in seqs:
                key = (p, seq)
                now_live.add(key)
                try:
                    meta = loc.read_meta(p, seq)
                except SegmentMissingError:
                    now_live.discard(key)
                    continue
                except CorruptionError as e:
                    if self._damaged_seg(p, seq) and self._damage_named(e):
                        STATS["segments_refused_naming_damage"] += 1
                        continue
                    raise DamageNotContained(f"segment {p}/{seq}: unexpected {e}") from e
                known = self.segs.get(key)
                if known is not None and known[0] == meta.checksum:
                    visible.update(known[1])
                    continue
                try:
                    with loc.open(meta) as r:
                        keys = [k for b in r.batches() for k in b.column("k").to_pylist()]
                except CorruptionError as e:
                    if self._damaged_seg(p, seq) and self._damage_named(e):
                        STATS["segments_refused_naming_damage"] += 1
                        continue
                    raise DamageNotContained(f"segment {p}/{seq}: unexpected {e}") from e
                fp = frozenset(keys)
                if known is None and self._deleted_rows_back(p, fp):
                    now_live.discard(key)
                    continue
                if known is not None and known[1] != fp:
                    raise SeqReused(
                        f"segment {p}/{seq} was published with rows {_span(known[1])} and is now "
                        f"published with other rows {_span(fp)}"
                    )
                if key in self.deleted:
                    raise Resurrected(f"segment {p}/{seq} was deleted and is visible again")
                self.segs[key] = (meta.checksum, fp)
                STATS["segments_read"] += 1
                visible.update(keys)
        for key in self.live - now_live:
            self._vanished(*key)
        for key in now_live & self.deleted:
            raise Resurrected(f"segment {key[0]}/{key[1]} was deleted and is visible again")
        self.live = now_live
        self.drop_window = self.opts.policy == "drop_oldest"
        STATS["observations"] += 1
        return visible

    def _deleted_rows_back(self, p: str, fp: frozenset[int]) -> bool:
        """A segment never seen before, on an object root's partition whose MANIFEST was
        damaged, holding only rows retention deleted (:data:`PENDING_FIXES`): left out
        of what the model sees."""
        if p not in self.manifest_damaged or not fp or not self.root.startswith("memory:"):
            return False
        if not all(self.status.get(k) in (GONE, LOST) for k in fp):
            return False
        return pending("deleted-rows-back-after-manifest-rebuild")

    def _vanished(self, p: str, seq: int) -> None:
        key = (p, seq)
        self.deleted.add(key)
        keys = self.segs.get(key, (0, frozenset()))[1]
        if self._damaged_seg(p, seq):  # quarantined
            for k in keys:
                if self.status[k] not in NEVER:
                    self.status[k] = LOST
            return
        acked_by_all = bool(self.subs) and all(key in acked for acked in self.subs.values())
        if not acked_by_all and self.uncertain_acks and not self.registry_broken:
            # an acknowledgement that raised may still have reached the ack log
            self._sync_subscribers()
            acked_by_all = all(key in acked for acked in self.subs.values())
        if not acked_by_all:
            if not self.drop_window:
                not_done = sorted(s for s, a in self.subs.items() if key not in a)
                raise UnackedDeleted(
                    f"segment {p}/{seq} ({len(keys)} rows) was deleted although "
                    + (
                        f"subscribers {not_done} had not acknowledged it"
                        if self.subs
                        else "no subscriber had acknowledged it"
                    )
                    + f" (policy {self.opts.policy}, time retention {self.opts.time_retention})"
                )
            if not self.registry_broken:
                reg = self._fresh_registry()
                for s in self.subs:
                    if key not in self.subs[s] and not reg.is_done(s, p, seq):
                        raise UnackedDeleted(
                            f"segment {p}/{seq} was deleted unacknowledged by {s} without a dropped record"
                        )
        for k in keys:
            self.status[k] = GONE
        STATS["segments_deleted"] += 1

    # -- the check after every reopen -------------------------------------------------------
    def recover_and_check(self) -> None:
        """Reopen every handle (recovery), seal what is committed, read everything, compare."""
        self.io.faults.clear()
        if self.live_due:  # handles that lived through a fault must work again first
            self.live_check()
        self.live_due = self.cont = False
        if self.reader is None:
            try:
                self._open_reader()
            except QuiverError as e:
                raise DamageNotContained(f"the store does not open: {e}") from e
        before = self._listing_quiet()
        self._sync_subscribers()
        for p in PARTS:
            if self.writers[p] is None and p not in self.damaged_parts:
                try:
                    self._open_writer(p)
                except Exception as e:
                    self._open_failed(p, e)
        for p in self.live_writers():
            store = self.writers[p]
            assert store is not None
            for what, fn in (("maintain", store.maintain), ("finalize", store.finalize)):
                try:
                    self._engine(f"{what} {p} at check", fn)
                except Outage:
                    pass
            self.unflushed[p] = []
        after = self._listing_quiet()
        self._check_came_back(before, after)
        if self.damage:
            self._check_store_works()
        visible = self.observe()
        self._compare(visible)
        self.sim = CrashSimulator.snapshot(self.base)
        self._trace_done()
        STATS["invariant_checks"] += 1
        STATS["reopen_checks"] += 1
        STATS[f"reopen_checks:{self.rule}"] += 1

    def _trace_done(self) -> None:
        SEEN.update(self.io.pairs)
        self.io.pairs.clear()
        self.io.trace.clear()

    def _sync_subscribers(self) -> None:
        """Registrations and acks whose call crashed may or may not be durable: ask."""
        if self.registry_broken or not (self.uncertain_subs or self.uncertain_acks):
            return
        if self.reader is None:
            return
        reg = self._fresh_registry()
        for s in self.uncertain_subs:
            if s in reg.subscribers() and s not in self.subs:
                self.subs[s] = set()
        for s, keys in self.uncertain_acks:
            if s in self.subs:
                self.subs[s].update(k for k in keys if reg.is_done(s, *k))
        self.uncertain_subs.clear()
        self.uncertain_acks.clear()

    def _listing_quiet(self) -> set[tuple[str, int]]:
        if self.reader is None:
            return set()
        with self.io.no_faults():
            return {(p, s) for p, seqs in self._listing().items() for s in seqs}

    def _check_came_back(self, before: set[tuple[str, int]], after: set[tuple[str, int]]) -> None:
        """A segment unpublished at the crash that recovery publishes again must not be one
        the ack log condemned (retention died between its .meta and its .arrow)."""
        back = {k for k in after - before if k in self.segs}
        if not back or self.registry_broken:
            return
        reg = self._fresh_registry()
        for p, seq in sorted(back):
            if reg.is_deleted(p, seq):
                raise Resurrected(
                    f"segment {p}/{seq} was condemned by retention (deleted record in the ack log) "
                    "and unpublished, and recovery published it again"
                )

    def _open_failed(self, p: str, e: Exception) -> None:
        if not isinstance(e, QuiverError):
            raise WrongError(f"opening partition {p} raised {type(e).__name__}: {e}") from e
        explained = [
            d
            for d in self.damage
            if d.partition == p or d.kind in ("commit", "acklog", "checkpoint")
        ]
        if not explained:
            raise WrongError(f"partition {p} does not open: {type(e).__name__}: {e}") from e
        if not self._damage_named(e):
            raise DamageNotContained(
                f"partition {p} does not open and the error does not name the damaged file "
                f"({[d.path for d in explained]}): {e}"
            ) from e
        self.damaged_parts.add(p)
        self._relax_partition(p)
        if any(d.kind in ("acklog", "checkpoint") for d in self.damage):
            self.registry_broken = True
        STATS["partitions_refused_naming_damage"] += 1

    def _relax_partition(self, p: str) -> None:
        """Rows of ``p`` not yet in a segment may be lost with its WAL or state."""
        sealed = {k for key, (_, fp) in self.segs.items() if key[0] == p for k in fp}
        for k, part in self.key_part.items():
            if part == p and k not in sealed and self.status[k] in (ACKED, COMMITTED, PENDING):
                self.status[k] = MAYBE
        for t in self.txns:
            if t.partition == p and t.state in ("open", "dead"):
                t.state = "lost"

    def _check_store_works(self) -> None:
        """With damage somewhere: retention runs and undamaged partitions take writes."""
        assert self.reader is not None
        reader = self.reader
        if not self.registry_broken:
            try:
                reader.run_retention()
            except QuiverError as e:
                raise DamageNotContained(
                    f"retention stops because of damage to {[d.path for d in self.damage]}: {e}"
                ) from e
            STATS["retention_runs_with_damage"] += 1

    def _compare(
        self, visible: Counter[int], parts: set[str] | None = None, live: bool = False
    ) -> None:
        """Compare what is readable with the model; ``parts``: only rows of these
        partitions must be readable (a live check: others may have no writer to seal
        them); ``live``: rows found absent are remembered, recovery must agree."""
        back = sorted(k for k in visible if k in self.lost_live)
        if back:
            relax = {self.key_part[k] for k in back} & self.faulted_parts("state")
            if relax and pending("state-dir-fsync-rollback"):
                back = [k for k in back if self.key_part[k] not in relax]
                self.lost_live -= set(visible)
                for k in visible:
                    if self.status[k] == LOST:
                        self.status[k] = ACKED
            if back:
                raise LiveDiffersFromRecovery(
                    f"rows a live reader did not find after a fault (the writer's finalize "
                    f"succeeded) are readable after reopen: {_span(back)} ({self._describe(back)})"
                )
        dups = sorted(k for k, n in visible.items() if n > 1)
        if dups:
            raise DuplicateRow(
                f"rows readable more than once: {_span(dups)} ({self._describe(dups)})"
            )
        bad = sorted(k for k in visible if self.status.get(k) in NEVER)
        if bad:
            by: dict[str, list[int]] = {}
            for k in bad:
                by.setdefault(self.status[k], []).append(k)
            if RAISED in by:
                raise AppendRaisedAfterDurable(
                    f"rows of appends that raised under wal.flush_interval=0 are readable: "
                    f"{_span(by[RAISED])}: a caller retrying them duplicates them"
                )
            if GONE in by or LOST in by:
                raise Resurrected(f"rows deleted or lost earlier are readable again: {by}")
            raise UndecidedVisible(f"rows that must never be visible are readable: {by}")
        missing = sorted(
            k
            for k, s in self.status.items()
            if s in MUST and k not in visible and (parts is None or self.key_part[k] in parts)
        )
        if missing and self.opts.policy == "drop_oldest" and not self.registry_broken:
            # drop_oldest may evict a segment inside the very call that sealed it: rows
            # of partitions with a dropped segment nobody observed may be gone
            reg = self._fresh_registry()
            unseen = {
                p
                for p in PARTS
                for seq in range(1, 400)
                if (p, seq) not in self.segs and reg.is_deleted(p, seq)
            }
            for k in missing:
                if self.key_part[k] in unseen:
                    self.status[k] = GONE
            missing = [k for k in missing if self.key_part[k] not in unseen]
        if missing:
            hit = self.faulted_parts()
            relax = [k for k in missing if self.status[k] == COMMITTED and self.key_part[k] in hit]
            if relax and pending("finalize-failure-loses-committed"):
                for k in relax:
                    self.status[k] = MAYBE
                missing = [k for k in missing if k not in set(relax)]
        if missing:
            raise LostRow(
                f"{len(missing)} acknowledged/committed rows are not readable: {_span(missing)} "
                f"({self._describe(missing)})"
            )
        for k in visible:
            if self.status[k] in (PENDING, MAYBE):
                self.status[k] = ACKED
        for k, s in self.status.items():
            if s in (PENDING, MAYBE) and k not in visible:
                p = self.key_part[k]
                if p not in self.damaged_parts and self.writers[p] is not None:
                    if parts is not None and p not in parts:
                        continue
                    self.status[k] = LOST
                    if live:
                        self.lost_live.add(k)

    def _describe(self, keys: list[int]) -> str:
        c = Counter((self.key_part[k], self.status[k]) for k in keys)
        return ", ".join(f"{n} {s} in {p}" for (p, s), n in sorted(c.items()))

    # -- crashes, lost directories, damage ------------------------------------------------------
    def power_loss(self, pick: int, kind: str = "power") -> str:
        """Power fails now: one crash state of the I/O since the last check is materialized."""
        self.io.faults.clear()
        states = self.sim.states(self.io.trace, points=[len(self.io.trace)])
        states = [s for s in states if s.kind == kind] or states
        state = states[pick % len(states)]
        self.kill_all()
        for d in ("store", "local"):
            shutil.rmtree(os.path.join(self.base, d), ignore_errors=True)
        state.materialize(self.base)
        os.makedirs(self.root, exist_ok=True)
        STATS[f"crash_state:{state.kind}"] += 1
        self.recover_and_check()
        return state.kind

    def lose_wal_path(self, p: str) -> None:
        """The executor-local disk holding ``p``'s WAL, LOCK and STATE is replaced."""
        assert self.wal_path is not None
        self.observe()
        self.kill(p)
        sealed = {k for key, (_, fp) in self.segs.items() if key[0] == p for k in fp}
        for k, part in self.key_part.items():
            if part == p and k not in sealed and self.status[k] in (ACKED, COMMITTED, PENDING):
                self.status[k] = MAYBE  # lost with the machine (ARCHITECTURE.md §21)
        for t in self.txns:
            if t.partition == p and t.state in ("open", "dead"):
                t.state = "lost"
                for k in t.keys:
                    if self.status[k] == TXN:
                        self.status[k] = DISCARDED
        shutil.rmtree(os.path.join(self.wal_path, p), ignore_errors=True)
        STATS["wal_path_losses"] += 1
        self.recover_and_check()

    def damage_files(self) -> dict[str, list[str]]:
        """Files a byte flip may hit, by kind; segments on the remote location count as
        ``arrow``/``meta`` and the quarantine mark there as ``quarantine``."""
        out: dict[str, list[str]] = {k: [] for k in FILE_KINDS}
        for dirpath, _, names in os.walk(self.base):
            for n in sorted(names):
                path = os.path.join(dirpath, n)
                if n.endswith(".tmp") or os.path.getsize(path) == 0:
                    continue
                if n == OBJECTS_LOCK:  # not data: see FLIP_KINDS
                    continue
                if n.endswith((".meta", ".arrow")) and "quarantine" in dirpath:
                    continue
                out[file_kind(path)].append(path)
        for path in self._remote_objects():
            if "/quarantine/" in path and path.endswith((".meta", ".arrow")):
                continue
            kind = file_kind(path).removeprefix("remote-")
            if kind in out and not path.endswith(".tmp"):
                out[kind].append(path)
        return {k: sorted(v) for k, v in out.items()}

    def _remote_objects(self) -> list[str]:
        url = self.cfg.segment.path
        if not url or not url.startswith("faultmem://"):
            return []
        prefix = url.rstrip("/") + "/"
        store = FaultyMemoryFS.store
        keys = [k if k.startswith("faultmem://") else "faultmem://" + k.lstrip("/") for k in store]
        return sorted(k for k in keys if k.startswith(prefix))

    @staticmethod
    def _flip(path: str, offset: int) -> None:
        if not path.startswith("faultmem://"):
            flip_byte(path, offset)
            return
        fs = FaultyMemoryFS()
        io, FaultyMemoryFS.io = FaultyMemoryFS.io, None  # the test's own hand, not the store's
        try:
            data = bytearray(fs.cat_file(path))
            data[offset] ^= 0xFF
            fs.pipe_file(path, bytes(data))
        finally:
            FaultyMemoryFS.io = io

    @staticmethod
    def _size(path: str) -> int:
        if not path.startswith("faultmem://"):
            return os.path.getsize(path)
        fs = FaultyMemoryFS()
        io, FaultyMemoryFS.io = FaultyMemoryFS.io, None
        try:
            return int(fs.size(path))
        finally:
            FaultyMemoryFS.io = io

    def flip(self, kind: str, index: int, frac: float, quarantine: bool) -> bool:
        """Kill everything, flip one byte of one file of ``kind``, (fsck), reopen, check."""
        self.observe_quiet()  # no reader after a kill without reopening: nothing to observe
        files = self.damage_files()[kind]
        if not files:
            return False
        path = files[index % len(files)]
        self.kill_all()
        size = self._size(path)
        offset = min(size - 1, int(frac * size))
        self._flip(path, offset)
        d = Damage(kind, path)
        name = os.path.basename(path)
        if kind in ("wal", "state"):
            d.partition = os.path.basename(
                os.path.dirname(path if kind == "state" else os.path.dirname(path))
            )
            self._relax_partition(d.partition)
        elif kind in ("meta", "arrow"):
            d.partition = os.path.basename(os.path.dirname(path))
            d.seq = int(name.split(".")[0])
            for k in self.segs.get((d.partition, d.seq), (0, frozenset()))[1]:
                if self.status[k] not in NEVER:
                    self.status[k] = MAYBE
        elif kind == "manifest":
            d.partition = os.path.basename(os.path.dirname(path))
            self.manifest_damaged.add(d.partition)
        elif kind == "commit":
            d.app = os.path.basename(os.path.dirname(path))
            d.version = int(name.split(".")[0])
            sealed = {k for _, fp in self.segs.values() for k in fp}
            for t in self.txns:
                if (t.app, t.version) == (d.app, d.version):
                    for k in t.keys:
                        if self.status[k] == COMMITTED and k not in sealed:
                            self.status[k] = MAYBE
        self.damage.append(d)
        STATS[f"flips:{kind}"] += 1
        if path.startswith("faultmem://"):
            STATS[f"flips:remote-{kind}"] += 1
        if kind in ("acklog", "checkpoint"):
            self._reopen_registry()
        if quarantine:
            self.fsck_quarantine()
        try:
            self.recover_and_check()
        except (DamageNotContained, WrongError) as e:
            # STORE is needed by every open: refusing it by name is the contract, and the
            # operator restores it; POLICY should fall back to the most conservative one
            needed = kind == "store" or (kind == "policy" and pending("policy-flip-stops-store"))
            if not (needed and os.path.basename(path) in str(e)):
                raise
            self._flip(path, offset)  # repaired
            self.damage.remove(d)
            STATS[f"flips_refused_by_name:{kind}"] += 1
            self.kill_all()
            self.recover_and_check()
        if kind == "manifest":
            self._check_manifest_rewritten(d)
        return True

    def _check_manifest_rewritten(self, d: Damage) -> None:
        """A damaged MANIFEST (:data:`FLIP_OUTCOMES`): the check above found every row
        once through the listing; the partition's writer, reopened by it, rewrote the
        manifest, which verifies again and no longer counts as damage."""
        from quiver_spark.control.manifest_store import ManifestStore

        assert d.partition is not None
        if self.writers.get(d.partition) is None:
            return  # the partition did not reopen (other damage): nothing rewrote it yet
        assert self.reader is not None
        try:
            with self.io.no_faults():
                got = ManifestStore(self.reader.objects).read(d.partition)
        except CorruptionError as e:
            raise DamageNotContained(
                f"the damaged MANIFEST of {d.partition} was not rewritten by its writer's open: {e}"
            ) from e
        if got is None:
            raise DamageNotContained(f"the MANIFEST of {d.partition} is gone after its damage")
        self.damage.remove(d)
        STATS["manifests_rewritten"] += 1

    def _reopen_registry(self) -> None:
        """After ack-log damage: the registry opens (torn tail cut: acks may be lost, which
        only means redelivery) or refuses naming the file; the model follows the registry."""
        try:
            self._open_reader()
            assert self.reader is not None
            reg = self.reader.subscribers
        except QuiverError as e:
            if not self._damage_named(e):
                raise DamageNotContained(
                    f"ack log damage reported without naming the file: {e}"
                ) from e
            self.registry_broken = True
            self.reader = None
            STATS["registry_refused_naming_damage"] += 1
            return
        except OSError as e:  # a fault armed earlier fired here: the process dies
            if self._fired():
                raise Crashed("reopen registry") from e
            raise
        from quiver_spark.objects.local import LocalObjects
        from quiver_spark.subscribers import records

        objects = self.reader.objects if self.reader is not None else LocalObjects(self.root)
        kept = set(records.unregistered(objects, reg.subscribers()))
        for s in list(self.subs):
            if s not in reg.subscribers():
                if s not in kept:  # its record is gone too: nothing witnesses it any more
                    STATS["registration_lost_without_record"] += 1
                    del self.subs[s]
                    continue
                # the record keeps its data (retention deletes nothing it may need, which
                # the model checks as for any subscriber); the operator registers it again
                self._readd_subscriber(s)
                reg.refresh()
                STATS["registration_kept_by_record"] += 1
            self.subs[s] = {key for key in self.subs[s] if reg.is_done(s, *key)}

    def _readd_subscriber(self, name: str) -> None:
        """``quiver subscribers PATH add NAME``: what the store tells an operator to run
        for a subscriber whose record outlived its registration."""
        from click.testing import CliRunner

        from quiver_spark.cli import cli

        res = CliRunner().invoke(cli, ["subscribers", self.root, "add", name])
        if res.exit_code != 0:
            raise WrongError(f"quiver subscribers add {name} failed: {res.output}")

    def fsck_quarantine(self) -> dict[str, Any]:
        """``quiver fsck --quarantine`` through the CLI: only damaged segments move."""
        from click.testing import CliRunner

        from quiver_spark.cli import cli

        self.observe_quiet()
        args = ["fsck", self.root, "--quarantine", "--json"]
        if self.wal_path:
            args += ["--wal-path", self.wal_path]
        before = self._fired()
        res = CliRunner().invoke(cli, args)
        if self._fired() > before:
            # a remote request of `quiver fsck` failed (its own process): it reports and
            # ends; the operator runs it again once the location answers, which must
            # complete what the failed run left (a segment half moved aside)
            self._note_fired(continued=self.cont)
            if res.exception is not None and not isinstance(res.exception, SystemExit):
                raise WrongError(
                    f"quiver fsck --quarantine met a failed request and crashed instead of "
                    f"reporting it: {res.exception!r}\n{res.output}"
                )
            self.io.faults.clear()
            self.live_due = self.cont = False
            STATS["fsck_runs_with_fault"] += 1
            res = CliRunner().invoke(cli, args)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            raise WrongError(f"quiver fsck --quarantine crashed: {res.exception!r}\n{res.output}")
        STATS["fsck_runs"] += 1
        return {"exit": res.exit_code, "output": res.output}

    def fsck_with_writers_stopped(self) -> None:
        """The operator stops the store's processes, runs ``quiver fsck --quarantine``
        and starts them again; then everything is checked."""
        self.observe_quiet()
        self.kill_all()
        self.fsck_quarantine()
        self.recover_and_check()

    def observe_quiet(self) -> None:
        if self.reader is not None:
            self.observe()


class _LogLines(logging.Handler):
    """The store's error lines while a finisher runs (what names a damaged object)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _span(keys: Any) -> str:
    ks = sorted(keys)
    if len(ks) <= 8:
        return str(ks)
    return f"{ks[:4]}...{ks[-4:]} ({len(ks)} rows)"


# -- the same model on an object-store root ---------------------------------------------------
OBJECT_FAULT_KINDS = ("fail", "conflict", "lost", "stale")
"""What an injected object request does: ``fail`` (an ``OSError`` before the request:
nothing happened), ``conflict`` (``ObjectConflict``, a 409: nothing written, retry),
``lost`` (the request succeeded and its response was lost: an ``OSError`` after it),
``stale`` (a listing answers from the bucket as it was when the fault was armed)."""

OBJECT_FLIP_KINDS = (
    "manifest", "lease", "acklog", "checkpoint", "store", "policy", "commit", "sub",
    "arrow", "meta", "staged",
)  # fmt: skip
"""Kinds of object the object-root test flips a byte in."""

OBJECT_FLIP_OUTCOMES = {
    "manifest": "recovered: readers list the partition, its writer's open rewrites the "
    "MANIFEST (§11.1), which verifies again",
    "lease": "refused by name: the partition's writer is refused (LeaseHeldError naming the "
    "LEASE: an unknown holder) until the observer saw it unchanged for its ttl, then taken "
    "over with a higher epoch; nothing lost",
    "acklog": "refused by name (CorruptionError naming the delta: the registry is out, "
    "writers go on) or recovered (a delta the CHECKPOINT already covers is not read)",
    "checkpoint": "refused by name: the registry does not open (CorruptionError naming "
    "CHECKPOINT); writers, readers of segments go on",
    "store": "refused by name: every open fails naming STORE until it is restored",
    "policy": "recovered: the most conservative policy applies (warning naming POLICY)",
    "commit": "refused by name (the partition's writer, whose WAL still holds a transaction "
    "of that batch, refuses to open naming the record: §10) or recovered (a batch already "
    "finalized never reads it)",
    "sub": "recovered: the ack log is the truth of registration; the record is skipped",
    "arrow": "refused by name: a reader of that segment fails naming it; every other "
    "segment, writer and retention goes on",
    "meta": "refused by name, as .arrow",
    "staged": "recovered while its writer lives: the rows are sealed from its WAL and the "
    "object removed (a writer that recovers with the transaction pending holds it, "
    "unresolved, until the object is repaired or removed); with its machine lost too, refused by "
    "name: the finisher leaves it (an observer names it in idle_failures, a writer logs "
    "quiver.staged.damaged), fsck reports problem `staged`, and exactly that "
    "transaction's rows are lost",
}
"""What the store does when an object of each kind is damaged (asserted by the flip walk
of ``test_state_space_objects.py``; see ARCHITECTURE.md §22, §11.1, §8.2)."""

OBJ_SEEN: Counter[tuple[str, str]] = Counter()
"""Object requests per (request, object kind) the workload made."""

OBJ_FIRED: Counter[tuple[str, str, str, str]] = Counter()
"""Injected object faults that fired per (request, object kind, fault kind, continued|crashed)."""


def object_kind(key: str) -> str:
    """The kind of object (or, for a listing, of the prefix) ``key`` names."""
    parts = [p for p in key.split("/") if p]
    if not parts:
        return "root"
    name, top = parts[-1], parts[0]
    simple = {"STORE": "store", "POLICY": "policy", "POLICY.copy": "policy-copy"}
    if len(parts) == 1 and name in simple:
        return simple[name]
    if top == "segments":
        if name.startswith("QUARANTINE") or "quarantine" in parts:
            return "quarantine"
        if name.endswith(".arrow"):
            return "arrow"
        if name.endswith(".meta"):
            return "meta"
        return "segments"
    if top == "partitions":
        if name.endswith(".txn") or parts[2:3] == ["txns"]:
            return "staged"  # a staged transaction, or the listing of them (§10.2)
        return {"LEASE": "lease", "MANIFEST": "manifest", "HEARTBEAT": "heartbeat"}.get(
            name, "partitions"
        )
    if top == "subscribers":
        if len(parts) > 1 and parts[1] == "log":
            return "acklog"
        if len(parts) > 1 and parts[1] == "records":
            return "sub"
        return "checkpoint" if name == "CHECKPOINT" else "subscribers"
    if top == "commits":
        return "commit"
    if top == "readers":
        return "readers-lease" if name.endswith(".lease") else "readers"
    if top == "metrics":
        return "metrics"
    return "other"


@dataclass
class ObjectFault:
    """Fail the ``at``-th request ``op`` on an object of ``kind`` in the way ``mode``
    (:data:`OBJECT_FAULT_KINDS`); ``sticky_for``: that many requests in a row."""

    op: str
    kind: str
    mode: str
    at: int = 1
    sticky_for: int = 1
    seen: int = 0
    fired: int = 0
    noted: int = 0
    snapshot: dict[str, tuple[bytes, str]] | None = None

    @property
    def done(self) -> bool:
        return self.fired >= self.sticky_for


class ObjectFaultHooks:
    """The ``faults`` of every :class:`~quiver_spark.objects.memory.MemoryObjects` a
    harness opens: one list of armed :class:`ObjectFault` for all its handles. Only
    requests of the test's own thread fail (a lease keeper renewing on its own thread
    is not the workload), and none while the harness's I/O is suspended (the test's
    own observation)."""

    def __init__(self, io: FaultyIO) -> None:
        from quiver_spark.objects.memory import Faults

        self.io = io
        self.armed: list[ObjectFault] = []
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.faults = Faults(before=self._before, after=self._after)
        self._lost: list[tuple[str, str, ObjectFault]] = []

    def _quiet(self) -> bool:
        import threading

        return bool(self.io.suspended) or threading.current_thread() is not threading.main_thread()

    def _before(self, op: str, key: str) -> None:
        self.faults.stale_list = None
        if self._quiet():
            return
        kind = object_kind(key)
        self.pairs[op, kind] += 1
        for f in self.armed:
            if f.done or f.op != op or f.kind != kind:
                continue
            f.seen += 1
            if f.seen < f.at:
                continue
            if f.mode == "fail":
                f.fired += 1
                raise OSError(errno_mod.EIO, f"injected: {op} {key} failed before it happened")
            if f.mode == "conflict":
                from quiver_spark.errors import ObjectConflict

                f.fired += 1
                raise ObjectConflict(key, f"injected: {op} {key}: 409 conflict")
            if f.mode == "stale":
                f.fired += 1
                self.faults.stale_list = f.snapshot
                return
            self._lost.append((op, key, f))
            return

    def _after(self, op: str, key: str) -> None:
        self.faults.stale_list = None
        for i, (o, k, f) in enumerate(self._lost):
            if (o, k) == (op, key):
                del self._lost[i]
                f.fired += 1
                raise OSError(errno_mod.EIO, f"injected: {op} {key} happened, its response lost")

    def fired(self) -> int:
        return sum(f.fired for f in self.armed)

    def active(self) -> bool:
        return any(not f.done for f in self.armed)

    def clear(self) -> None:
        self.armed.clear()
        self._lost.clear()
        self.faults.stale_list = None


class ObjectStoreHarness(StoreHarness):
    """:class:`StoreHarness` with the root on the fake object store (``memory://``): the
    WAL, STATE and LOCK on local disk (``wal.path``), every other object in the bucket.
    A killed process, or a power loss, abandons its handles (the bucket keeps what each
    request did; its leases are never released: a new handle takes them over as a new
    process of this host takes over a dead one's). Object faults are armed through
    :class:`ObjectFaultHooks`; local I/O faults are not used here."""

    def __init__(self, base: str, opts: Options | None = None) -> None:
        self.bucket = f"qss-{uuid.uuid4().hex[:12]}"
        os.makedirs(os.path.abspath(base), exist_ok=True)
        opts = dataclasses.replace(opts or Options(), layout="external", segments="local")
        self.objfaults: ObjectFaultHooks | None = None
        # partitions whose LEASE a lost machine left, not yet seen expired here
        self.lost_leases: set[str] = set()
        # the store's policy expires subscribers idle for an hour (by the storage's
        # clock, which never runs that long in a sequence): any expiry is a violation
        self.expiry_on = False
        super().__init__(base, opts)

    def _make_root(self) -> str:
        return f"memory://{self.bucket}/s"

    def _wal_path(self) -> str | None:
        return os.path.join(self.base, "local")

    def _hooks(self) -> ObjectFaultHooks:
        if self.objfaults is None:
            self.objfaults = ObjectFaultHooks(self.io)
        return self.objfaults

    def _attach(self, store: QuiverStore) -> QuiverStore:
        store.objects.faults = self._hooks().faults  # type: ignore[attr-defined]
        return store

    def _open(self, partition: str | None) -> QuiverStore:
        """``QuiverStore.open`` on the root, its objects failing as armed from the first
        request of the open (recovery, the lease, the manifest claim)."""
        import quiver_spark.store as store_mod

        orig = store_mod.open_objects
        hooks = self._hooks()

        def opener(*args: Any, **kw: Any) -> Any:
            objects = orig(*args, **kw)
            objects.faults = hooks.faults
            return objects

        store_mod.open_objects = opener  # type: ignore[assignment]
        try:
            return self._attach(
                QuiverStore.open(
                    self.root, self.cfg, partition=partition, io=self.io, background=False
                )
            )
        finally:
            store_mod.open_objects = orig  # type: ignore[assignment]

    def bucket_objects(self) -> Any:
        """The bucket as the test's own hand sees it (no faults)."""
        from quiver_spark.objects.memory import MemoryObjects

        return MemoryObjects(self.bucket, "s")

    def _open_reader(self) -> None:
        self.reader = self._open(None)

    def _open_writer(self, p: str) -> None:
        if p in self.lost_leases:
            self._watch_lost_lease(p)
        self.writers[p] = self._open(p)
        self.gen[p] += 1
        STATS["writer_opens"] += 1
        self._note_held()

    def _note_held(self) -> None:
        """A writer that recovers with a pending transaction whose staged object is
        damaged holds it, unresolved, until the object is repaired or removed (§10.2;
        the object may be another writer's under a reused id): nothing here repairs
        it, so its rows may stay unpublished."""
        for p in self.live_writers():
            store = self.writers[p]
            w = store.writer if store is not None else None
            if w is None or not w.staged.held:
                continue
            sealed = {k for key, (_, fp) in self.segs.items() if key[0] == p for k in fp}
            for t in self.txns:
                if t.partition != p or t.txn_id not in w.staged.held or t.held:
                    continue
                t.held = True
                STATS["held_on_a_damaged_staged_object"] += 1
                for k in t.keys:
                    if k not in sealed and self.status[k] == COMMITTED:
                        self.status[k] = MAYBE

    def _compare(
        self, visible: Counter[int], parts: set[str] | None = None, live: bool = False
    ) -> None:
        self._note_held()  # an in-place recovery after a failed I/O holds too
        super()._compare(visible, parts, live)

    @staticmethod
    def _kill_handle(store: QuiverStore | None) -> None:
        """As :meth:`StoreHarness._kill_handle`; the writer's lease is abandoned, not
        released: its renewals stop and this process forgets it, as a dead one would."""
        lease = None
        if store is not None and store.writer is not None:
            lease = getattr(store.writer, "lease", None)
        StoreHarness._kill_handle(store)
        if lease is not None:
            keeper = lease.keeper
            if keeper is not None:
                keeper.stop()
            lease._forget()

    # -- subscriber expiry (§13.8) -----------------------------------------------------------
    EXPIRE_AFTER_S = 3600.0

    def expire_idle_subscribers(self) -> None:
        """The store's policy from now on: a subscriber idle for :attr:`EXPIRE_AFTER_S`
        by the storage's clock is expired. A sequence never lasts that long on it, so
        every subscriber stays registered whatever the machines' wall clocks say."""
        if self.expiry_on:
            return
        from quiver_spark.policy import EXPIRE_AFTER, replace_policy

        with self.io.no_faults():
            replace_policy(self.bucket_objects(), {EXPIRE_AFTER: self.EXPIRE_AFTER_S})
        self.expiry_on = True

    def check_nothing_expired(self, what: str) -> None:
        """Every subscriber of the model is still registered and its record is no
        tombstone (:class:`ExpiredWhileActive`)."""
        if not self.expiry_on or self.registry_broken or self.reader is None:
            return
        from quiver_spark.subscribers import records

        reg = self._fresh_registry()
        with self.io.no_faults():
            recs = records.list_records(self.bucket_objects())
        for sub in sorted(self.subs):
            rec = recs.get(sub)
            if sub not in reg.subscribers() or (rec is not None and rec.expired_ns is not None):
                raise ExpiredWhileActive(
                    f"subscriber {sub} was expired after {what}, though the storage's clock "
                    f"says it was active within the last {self.EXPIRE_AFTER_S:g} s "
                    f"(registered: {sorted(reg.subscribers())}, record: {rec})"
                )
        STATS["expiry_checks"] += 1

    def retention(self, expire: bool, via_gc: bool) -> None:
        """As :meth:`StoreHarness.retention`; an ``expire`` pass runs with a wall clock
        two hours ahead, which must expire no subscriber."""
        super().retention(expire, via_gc)
        self.check_nothing_expired("a retention pass" + (" two hours ahead" if expire else ""))

    # -- staged transactions (§10.2) ----------------------------------------------------
    def txn_append(self, t: Txn, variant: str, n: int) -> None:
        """As :meth:`StoreHarness.txn_append`; the batch is kept, as the sink keeps the
        batches it appended, to be staged after the flush."""
        before = len(t.keys)
        super().txn_append(t, variant, n)
        if len(t.keys) > before:
            t.batches.append(make_batch(variant, t.keys[before:]))

    def flush(self, p: str) -> None:
        """As :meth:`StoreHarness.flush`; then, as the sink does after its flush, each
        durable open transaction of this writer not staged yet is staged."""
        super().flush(p)
        self._stage_flushed(p)

    def _stage_flushed(self, p: str) -> None:
        store = self.writers[p]
        assert store is not None
        for t in self.txns:
            if (
                t.partition != p
                or t.state != "open"
                or not t.durable
                or t.gen != self.gen[p]
                or t.staged
                or t.stage_failed
                or not t.keys  # a task without rows stages nothing and reports nothing
            ):
                continue
            try:
                wrote, _ = self._engine(
                    f"stage_txn {t.txn_id} of {p}",
                    lambda t=t: store.stage_txn(t.txn_id, list(t.batches)),
                )
            except (Crashed, Outage):
                t.stage_failed = True  # the task failed: Spark runs it again as a new one
                raise
            if not wrote:
                raise WrongError(f"stage_txn of {p}'s transaction {t.txn_id} wrote nothing")
            t.staged = True
            STATS["txns_staged"] += 1

    def candidates(self, app: str) -> list[Txn]:
        """On this root only staged transactions are reported, so only they may win."""
        return [t for t in super().candidates(app) if t.staged]

    def open_txns(self, p: str | None = None) -> list[Txn]:
        """A staged transaction was reported: its task appends nothing more."""
        return [t for t in super().open_txns(p) if not (t.staged or t.stage_failed)]

    def commit(self, app: str, winners: list[Txn]) -> None:
        """As :meth:`StoreHarness.commit`; a winner whose staged object was damaged when
        its machine was lost has no rows left anywhere (§22: a named loss)."""
        super().commit(app, winners)
        for t in winners:
            if t.unsealable or t.held:
                for k in t.keys:
                    if self.status[k] == COMMITTED:
                        self.status[k] = MAYBE

    def _foreign_due(self) -> None:
        """Time passes for every live writer's looks at undecided transactions, which
        back off on the monotonic clock (after 1 s, 2, 4...): another incarnation's
        staged ones (its :class:`~quiver_spark.partition.staged.StagedBook`) and its own
        pending ones undecided past ``RESOLVE_GRACE_S``. The test moves the next look to
        now instead of waiting, so a batch decided since is sealed at the next tick
        however fast or slow the steps before ran. The attributes are reached without a
        default: were they renamed, this fails instead of silently doing nothing."""
        for p in self.live_writers():
            store = self.writers[p]
            w = store.writer if store is not None else None
            if w is None:
                continue
            for looks in (w.staged.foreign, w.staged.held, w.rows.recheck):
                for txn_id, (_, interval) in list(looks.items()):
                    looks[txn_id] = (0.0, interval)

    def live_check(self) -> None:
        self._foreign_due()
        super().live_check()

    def _staged_damage(self, p: str | None = None) -> list[Damage]:
        return [d for d in self.damage if d.kind == "staged" and p in (None, d.partition)]

    def _forget_removed_staged_damage(self) -> None:
        """A damaged staged object the store removed (its rows sealed, or its batch
        decided without it) is no longer damage anywhere."""
        damaged = self._staged_damage()
        if not damaged:
            return
        objects = self.bucket_objects()
        for d in damaged:
            if objects.get(self._key(d.path)) is None:
                self.damage.remove(d)
                STATS["staged_damage_removed"] += 1

    def _open_failed(self, p: str, e: Exception) -> None:
        """A damaged staged object must never keep its partition's writer from opening
        (§22: only a lost machine's rows depend on it)."""
        if isinstance(e, QuiverError) and any(
            os.path.basename(d.path) in str(e) for d in self._staged_damage(p)
        ):
            raise DamageNotContained(
                f"partition {p} does not open because of a damaged staged transaction: {e}"
            ) from e
        super()._open_failed(p, e)

    # -- a lost machine (§10.2) ----------------------------------------------------------
    LOST_HOST = "lost-machine"

    def _lease_of_a_lost_machine(self, p: str) -> None:
        """``p``'s LEASE as its lost machine left it: held, by a process of another host
        (whose liveness nobody here can know): it is free once a process watched it
        unchanged for its ttl."""
        from quiver_spark.control import lease as lease_mod

        objects = self.bucket_objects()
        key = f"partitions/{p}/LEASE"
        got = objects.get(key)
        if got is None:
            return
        try:
            body = lease_mod.decode_lease(key, got.data)
        except CorruptionError:
            return  # damaged: already an unknown holder, watched for its ttl alike
        if body.released:
            return
        holder = dataclasses.replace(
            body.holder, host=self.LOST_HOST, pid=1, pid_start=1, node=self.LOST_HOST
        )
        objects.put(key, lease_mod._encode(body.epoch, holder, seq=body.seq + 1))
        self.lost_leases.add(p)

    def _watch_lost_lease(self, p: str) -> None:
        """A new writer of ``p`` meets the lease a lost machine left: refused (naming the
        LEASE) until this process has watched it unchanged for its ttl, then taken over."""
        from quiver_spark.control import lease as lease_mod
        from quiver_spark.errors import LeaseHeldError

        self.lost_leases.discard(p)
        got = self.bucket_objects().get(f"partitions/{p}/LEASE")
        try:
            body = lease_mod.decode_lease("LEASE", got.data) if got is not None else None
        except CorruptionError:
            body = None
        if body is None or body.released or body.holder.host != self.LOST_HOST:
            return  # taken and released since (an observer sealed the partition)
        ident = (self.root, f"partitions/{p}/LEASE")
        seen = lease_mod._seen.get(ident)
        if seen is not None and seen.clock() - seen.first > body.holder.ttl_s:
            return  # this process watched it for its ttl already: free
        with self.io.no_faults():  # the test's probe, not the workload
            try:
                probe = self._open(p)
            except LeaseHeldError as e:
                if "LEASE" not in str(e):
                    raise WrongError(
                        f"a lost machine's lease refused without naming it: {e}"
                    ) from e
            else:
                self._kill_handle(probe)
                raise WrongError(
                    f"a writer of {p} took at once the lease of a lost machine it never saw "
                    "before: a live writer on another machine could be fenced before its ttl"
                )
        self._expire_observed(p)

    def lose_machine(self, p: str, observer: bool) -> None:
        """The machine of ``p``'s writer is lost: the process dies (its handle abandoned,
        its lease left held by a host nobody here knows) and its local disk (``p``'s WAL,
        STATE, LOCK) is gone. Committed staged transactions are sealed by whoever comes
        next (``observer``: a pass of the reader handle's ``finalize_idle_partitions``
        while no writer of ``p`` is open, else ``p``'s next writer), each exactly once;
        undecided staged ones stay candidates; everything else the WAL alone held is
        lost (transactions never staged are discarded, rows outside transactions are
        maybe: ARCHITECTURE.md §10.2 "Limits"); a damaged staged object loses exactly its
        transaction's rows, named."""
        observer = observer and self.reader is not None
        named = self._machine_gone(p)
        STATS[f"machine_losses:{'observer' if observer else 'writer'}"] += 1
        logged = _LogLines()
        logging.getLogger("quiver_spark").addHandler(logged)
        try:
            if observer:
                if not self._observer_seals(p):
                    return  # a fault fired in the pass: its half takes over
            else:
                self.start_writer(p)
                if self.writers[p] is None:
                    return
                self.maintain(p)  # its first tick seals what the lost machine committed
                if self.any_fired():
                    return
                self.recover_and_check()
        finally:
            logging.getLogger("quiver_spark").removeHandler(logged)
        self._check_loss_named(p, named, logged.lines, observer=observer)
        if observer:
            self.recover_and_check()

    def _machine_gone(self, p: str) -> list[Damage]:
        """The model of :meth:`lose_machine` up to whoever comes next: ``p``'s writer
        dies, its LEASE is left to a host nobody knows, its disk goes; returns the
        damaged staged objects whose loss must be named."""
        assert self.wal_path is not None
        self.observe_quiet()
        self.kill(p)
        self._lease_of_a_lost_machine(p)
        shutil.rmtree(os.path.join(self.wal_path, p), ignore_errors=True)
        sealed = {k for key, (_, fp) in self.segs.items() if key[0] == p for k in fp}
        damaged = {d.seq: d for d in self._staged_damage(p)}
        named: list[Damage] = []  # damaged staged objects whose loss must be named
        for t in self.txns:
            if t.partition != p:
                continue
            if t.staged:
                t.wal_lost = True
            if t.staged and t.state == "won" and any(k not in sealed for k in t.keys):
                STATS["machine_losses:committed_unsealed_txns"] += 1
            if t.staged and t.state == "open":
                STATS["machine_losses:undecided_staged_txns"] += 1
            if t.staged and t.txn_id in damaged:
                t.unsealable = True
                unsealed = [k for k in t.keys if k not in sealed and self.status[k] == COMMITTED]
                for k in unsealed:
                    self.status[k] = MAYBE
                if unsealed:
                    named.append(damaged[t.txn_id])
            elif not t.staged and t.state in ("open", "dead"):
                t.state = "lost"  # never reported: lost with the machine
                for k in t.keys:
                    if self.status[k] == TXN:
                        self.status[k] = DISCARDED
            elif not t.staged and t.state == "won":
                for k in t.keys:
                    if k not in sealed and self.status[k] == COMMITTED:
                        self.status[k] = MAYBE
        for k, part in self.key_part.items():
            if part == p and k not in sealed and self.status[k] in (ACKED, PENDING):
                self.status[k] = MAYBE  # only its WAL held it (§10.2 "Limits")
        STATS["machine_losses"] += 1
        return named

    def _observer_seals(self, p: str) -> bool:
        """Two passes of the observer a lease ttl apart; after the second, every
        committed staged transaction of ``p`` is readable. False: a fault fired."""
        reader = self.reader
        assert reader is not None
        first, _ = self._engine("an observer's pass", reader.finalize_idle_partitions)
        if self.any_fired():
            return False
        if any(pid == p for pid, _ in first):
            raise WrongError(
                f"an observer sealed {p} at its first sight of a lost machine's lease: a "
                "live writer on another machine could be fenced before its ttl"
            )
        self._expire_observed(p)
        self._engine("an observer's pass after the ttl", reader.finalize_idle_partitions)
        if self.any_fired():
            return False
        if any(d.kind == "manifest" and d.partition == p for d in self.damage):
            # what a damaged MANIFEST sealed is unknown: the observer never guesses, it
            # names the partition; its next writer rewrites the MANIFEST and seals
            staged = self.bucket_objects().list(f"partitions/{p}/txns/")
            if staged and "MANIFEST" not in reader.idle_failures.get(p, ""):
                raise DamageNotContained(
                    f"an observer left {p}'s staged transactions without naming its damaged "
                    f"MANIFEST: {reader.idle_failures}"
                )
            STATS["observer_refused_damaged_manifest"] += 1
            return True
        self._compare(self.observe(), parts={p})
        STATS["observer_seal_checks"] += 1
        return True

    def _check_loss_named(
        self, p: str, named: list[Damage], logged: list[str], *, observer: bool
    ) -> None:
        """Each damaged staged object whose committed rows are lost with the machine is
        named: logged ``quiver.staged.damaged`` (an observer also puts it in
        ``idle_failures``) and reported by fsck as problem ``staged``."""
        if not named:
            return
        from quiver_spark.fsck import check_store

        if self.reader is None:
            self._open_reader()
        assert self.reader is not None
        with self.io.no_faults():
            report = check_store(self.reader)
        problems = [f.file for f in report.problems if f.kind == "staged"]
        failures = " ".join(self.reader.idle_failures.values()) if observer else ""
        for d in named:
            name = os.path.basename(d.path)
            if not any("quiver.staged.damaged" in m and name in m for m in logged):
                raise DamageNotContained(
                    f"the committed rows of a lost machine's damaged staged transaction "
                    f"{d.path} were lost without quiver.staged.damaged naming it: {logged}"
                )
            if observer and name not in failures:
                raise DamageNotContained(
                    f"an observer pass left the damaged staged transaction {d.path} without "
                    f"naming it in idle_failures: {self.reader.idle_failures}"
                )
            if not any(name in f for f in problems):
                raise DamageNotContained(
                    f"fsck does not report the damaged staged transaction {d.path} "
                    f"(problem `staged`): {[f.line() for f in report.problems]}"
                )
        STATS["flips_refused_by_name:staged"] += 1

    def _flip_staged(
        self, index: int, frac: float, path: str | None = None, check: bool = True
    ) -> bool:
        """A byte of one staged object flipped: while its writer lives, the writer seals
        its rows from its WAL, as if nothing happened (``check``: every handle is checked
        now), and the damage matters only if the machine is lost too
        (:meth:`lose_machine`); once its machine was lost, its rows not sealed yet are
        lost with it."""
        self.observe_quiet()
        if path is None:
            files = self.damage_files()["staged"]
            if not files:
                return False
            path = files[index % len(files)]
        size = self._size(path)
        self._flip(path, min(size - 1, int(frac * size)))
        key = self._key(path)
        txn_id = int(key.rsplit("/", 1)[-1].split(".")[0])
        part = key.split("/")[1]
        self.damage.append(Damage("staged", path, partition=part, seq=txn_id))
        STATS["flips:staged"] += 1
        # a lost machine's transaction not sealed yet: the flipped object was the only
        # copy of its rows, so they are lost (named by whoever seals, §22); committed
        # later, its rows are lost all the same (:meth:`commit`)
        sealed = {k for k2, (_, fp) in self.segs.items() if k2[0] == part for k in fp}
        for t in self.txns:
            if t.partition == part and t.txn_id == txn_id and t.staged and t.wal_lost:
                if any(k not in sealed for k in t.keys):
                    t.unsealable = True
                    STATS["flips:staged_of_a_lost_machine"] += 1
                for k in t.keys:
                    if k not in sealed and self.status[k] == COMMITTED:
                        self.status[k] = MAYBE
        if check:
            self.recover_and_check()
        return True

    # -- faults ---------------------------------------------------------------------------
    def _fired(self) -> int:
        return super()._fired() + self._hooks().fired()

    def any_fired(self) -> bool:
        return any(f.fired for f in self.io.faults) or any(
            f.fired > f.noted for f in self._hooks().armed
        )

    def active_faults(self) -> bool:
        return super().active_faults() or self._hooks().active()

    def arm_object(
        self,
        op: str,
        kind: str,
        mode: str,
        *,
        at: int = 1,
        cont: bool = False,
        sticky_for: int = 1,
        retries: int = 0,
    ) -> ObjectFault:
        hooks = self._hooks()
        if hooks.armed and cont != self.cont:
            hooks.clear()  # one mode at a time
        self.cont = cont
        self.retries = retries
        fault = ObjectFault(op, kind, mode, at=at, sticky_for=sticky_for)
        if mode == "stale":
            fault.snapshot = self.bucket_objects().snapshot()
        hooks.armed.append(fault)
        STATS["faults_armed"] += 1
        STATS["faults_armed_continue" if cont else "faults_armed_crash"] += 1
        return fault

    def _note_fired(self, continued: bool = False) -> None:
        hooks = self._hooks()
        mode = "continued" if continued else "crashed"
        for f in hooks.armed:
            n = f.fired - f.noted
            if n <= 0:
                continue
            f.noted = f.fired
            OBJ_FIRED[f.op, f.kind, f.mode, mode] += n
            FIRED[f.op, f.kind, mode] += n
            STATS["faults_fired"] += n
            STATS[f"faults_{mode}"] += n
            STATS[f"object_faults:{f.mode}"] += n
        super()._note_fired(continued)
        if continued:
            hooks.armed[:] = [f for f in hooks.armed if not f.done]
        else:
            hooks.clear()

    def recover_and_check(self) -> None:
        self._hooks().clear()
        self._foreign_due()
        super().recover_and_check()
        self._forget_removed_staged_damage()
        self._hooks().clear()
        OBJ_SEEN.update(self._hooks().pairs)
        self._hooks().pairs.clear()

    def close(self) -> None:
        super().close()
        OBJ_SEEN.update(self._hooks().pairs)
        self._hooks().pairs.clear()

    # -- crashes and damage -----------------------------------------------------------------
    def power_loss(self, pick: int, kind: str = "power") -> str:
        """On an object root a power loss is every process abandoning its handles: the
        bucket keeps what each request did (the local WAL as written)."""
        self._hooks().clear()
        self.io.faults.clear()
        self.kill_all()
        STATS["crash_state:abandoned"] += 1
        self.recover_and_check()
        return "abandoned"

    def damage_files(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {k: [] for k in OBJECT_FLIP_KINDS}
        for info in self.bucket_objects().list(""):
            kind = object_kind(info.key)
            if kind in out and info.size > 0:
                out[kind].append(f"{self.root}/{info.key}")
        return {k: sorted(v) for k, v in out.items()}

    def _key(self, path: str) -> str:
        return path[len(self.root) + 1 :]

    def _flip(self, path: str, offset: int) -> None:  # type: ignore[override]
        objects = self.bucket_objects()
        got = objects.get(self._key(path))
        assert got is not None, path
        data = bytearray(got.data)
        data[offset] ^= 0xFF
        objects.put(self._key(path), bytes(data))

    def _size(self, path: str) -> int:  # type: ignore[override]
        got = self.bucket_objects().get(self._key(path))
        assert got is not None, path
        return len(got.data)

    def flip(self, kind: str, index: int, frac: float, quarantine: bool) -> bool:
        """As :meth:`StoreHarness.flip` (no ``quiver fsck`` here); a damaged LEASE is
        checked for its own outcome (:data:`OBJECT_FLIP_OUTCOMES`)."""
        if kind == "staged":
            return self._flip_staged(index, frac)
        if kind != "lease":
            return super().flip(kind, index, frac, False)
        self.observe_quiet()
        files = self.damage_files()["lease"]
        if not files:
            return False
        path = files[index % len(files)]
        p = path.split("/")[-2]
        self.kill_all()
        self._flip(path, min(self._size(path) - 1, int(frac * self._size(path))))
        STATS["flips:lease"] += 1
        self._open_reader()
        from quiver_spark.errors import LeaseHeldError

        try:
            self._open_writer(p)
        except LeaseHeldError as e:
            if "LEASE" not in str(e) or "damaged" not in str(e):
                raise DamageNotContained(
                    f"a damaged lease refused the writer without naming it: {e}"
                ) from e
            STATS["flips_refused_by_name:lease"] += 1
        else:
            raise WrongError(
                f"a writer of {p} opened at once over a damaged LEASE: a live holder whose "
                f"lease object was damaged could be fenced without its ttl passing"
            )
        self._expire_observed(p)
        self.recover_and_check()  # the writer takes the lease over; nothing lost
        return True

    def _expire_observed(self, p: str) -> None:
        """This process has watched ``p``'s LEASE unchanged for longer than its ttl (the
        test moves the start of the observation back instead of waiting)."""
        from quiver_spark.control import lease as lease_mod

        for ident, seen in list(lease_mod._seen.items()):
            if ident[0] == self.root and ident[1] == f"partitions/{p}/LEASE":
                seen.first -= lease_mod.DEFAULT_TTL_S + 1

    def _check_manifest_rewritten(self, d: Damage) -> None:
        super()._check_manifest_rewritten(d)

    def create_with_fault(self, op: str, kind: str, err: int, cont: bool) -> None:  # type: ignore[override]
        """A new store is created on a fresh bucket while request ``op`` on an object of
        ``kind`` fails once in the way ``err`` names (:data:`OBJECT_FAULT_KINDS`, here a
        string); the creator fails or goes on, then it (or a new process) opens again:
        the store opens, takes rows and returns them, the first creator's row at most once."""
        root = f"memory://{self.bucket}-fresh-{uuid.uuid4().hex[:6]}/s"
        cfg = dataclasses.replace(
            self.cfg,
            wal=dataclasses.replace(self.cfg.wal, path=os.path.join(self.base, "fresh-wal")),
        )
        hooks = ObjectFaultHooks(FaultyIO())
        fault = ObjectFault(op, kind, str(err))
        hooks.armed.append(fault)
        import quiver_spark.store as store_mod

        orig = store_mod.open_objects

        def opener(*args: Any, **kw: Any) -> Any:
            objects = orig(*args, **kw)
            objects.faults = hooks.faults
            return objects

        def attempt(first: bool) -> list[int]:
            store_mod.open_objects = opener  # type: ignore[assignment]
            try:
                store = QuiverStore.open(root, cfg, partition="p-0", background=False)
            finally:
                store_mod.open_objects = orig  # type: ignore[assignment]
            try:
                store.append(make_batch("base", [0] if first else [1, 2, 3]))
                store.flush()
                if first:
                    return []
                store.finalize()
                return sorted(k for b in store.scan() for k in b.column("k").to_pylist())
            finally:
                if first:
                    self._kill_handle(store)  # the creator dies here (or after its fault)
                else:
                    store.close()

        try:
            attempt(True)
        except (QuiverError, OSError) as e:
            if not fault.fired:
                raise WrongError(f"creating a store failed without a fault: {e}") from e
        if fault.fired:
            mode = "continued" if cont else "crashed"
            OBJ_FIRED[op, kind, fault.mode, mode] += fault.fired
            FIRED[op, kind, mode] += fault.fired
            STATS["faults_fired"] += fault.fired
            STATS[f"object_faults:{fault.mode}"] += fault.fired
        hooks.clear()
        try:
            rows = attempt(False)
        except QuiverError as e:
            raise StuckHandle(
                f"a store whose creation failed at {op} on {kind} ({fault.mode}) does not "
                f"open again once the fault cleared: {type(e).__name__}: {e}"
            ) from e
        if [k for k in rows if k != 0] != [1, 2, 3] or rows.count(0) > 1:
            raise LostRow(f"a store created after a failed creation returns {rows}, not [1, 2, 3]")
        OBJ_SEEN.update(hooks.pairs)
        STATS["creations_with_fault"] += 1
