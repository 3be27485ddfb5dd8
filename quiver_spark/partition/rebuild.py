"""A partition writer's recovery: the plans of :mod:`.recovery` applied, at open
(ARCHITECTURE.md §9.3) and in place after a failed I/O in a process that goes on (§9.4).

:class:`Rebuild` rebuilds the groups of the writer's state it is given (:mod:`.state`)
from disk (:meth:`~Rebuild.recover`): the reads and decisions are :mod:`.recovery`'s;
what is written, removed and replayed, in this order, is here (the fence first where the
publication has one, §16.2). Where the two kinds of root differ it asks the
location's publication (:class:`~quiver_spark.segment.publication.Publication`:
whether the ack log's deleted marks are needed, the fence, the MANIFEST its plans go
by, what becomes of STATE's segment, the staged transactions, the txn ceiling). A
replay may finalize exactly as live appends do: it admits through the
:class:`~.sealing.Sealing` it is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from .. import format as fmt
from ..errors import CorruptionError, SegmentMissingError, StoreClosedError, WalFailedError
from ..ranges import RangeSet
from ..segment import SegmentMeta
from ..staging import read_staged
from ..wal import WalWriter, recover_wal, wal_limits
from .model import RecoveryReport, Txn
from .publication import publish_own
from .recovery import (
    Publishing,
    PublishingPlan,
    Replayed,
    deleted_marks,
    gone_unpublished,
    list_staged,
    minus,
    next_segment_seq,
    plan_publishing,
    plan_recovery,
    read_state,
    replay,
    staged_by_another,
)
from .sealing import Sealing
from .staged import StagedBook, staged_objects
from .state import Lifecycle, PartitionHandles, SealedSegments, UnsealedRows, WalLedger

log = logging.getLogger(__name__)


@dataclass
class StagedLook:
    """What recovery's reads of the staged objects under its pending transactions' ids
    found (:meth:`Rebuild.staged_by_others`)."""

    others: list[int] = field(default_factory=list)
    """Another incarnation's transaction: this WAL's is dropped."""
    damaged: list[int] = field(default_factory=list)
    """Damaged: this WAL's transaction is held, unresolved (§10.2)."""
    removed: list[int] = field(default_factory=list)
    """Held before and gone now: this WAL's transaction is dropped as not committed."""


def held_txns(state: dict, path: str) -> set[int]:
    """STATE's ``held_txns`` (§6.1): the pending transactions held on a damaged staged
    object when it was written (absent: none)."""
    raw = state.get("held_txns") or []
    if not isinstance(raw, list) or not all(isinstance(t, int) for t in raw):
        raise CorruptionError(
            path, fmt.FRAME_SIZE, f"STATE held_txns {raw!r} is not a list of ints"
        )
    return set(raw)


class Rebuild:
    """Rebuilds a partition writer's state from disk: at open, and at the writer's next
    call after a failure discarded it; a replay seals through ``sealing`` exactly as
    live appends do."""

    report: RecoveryReport
    """What the last recovery found (set by :meth:`recover`'s callers)."""

    def __init__(
        self,
        handles: PartitionHandles,
        ledger: WalLedger,
        rows: UnsealedRows,
        sealed: SealedSegments,
        life: Lifecycle,
        staged: StagedBook,
        sealing: Sealing,
    ) -> None:
        self.handles = handles
        self.ledger = ledger
        self.rows = rows
        self.sealed = sealed
        self.life = life
        self.staged = staged
        self.sealing = sealing

    def state_durable(self, state: dict) -> None:
        """Write the STATE just read again, atomically, before acting on it.

        The STATE read may be one whose rename is not durable yet (the directory fsync
        after it failed in this process, or the process that wrote it died before the
        fsync): a segment published on its word, with the old STATE back after a power
        loss, would be read beside the WAL records the old STATE replays.
        """
        self.handles.io.atomic_write(
            self.handles.state_path, fmt.encode_frame(fmt.MAGIC_STATE, state)
        )

    # -- recovery: applying the plans of .recovery (§9.3) ------------------------------
    def recover(self, *, republish: bool = False) -> RecoveryReport:
        """Rebuild the in-memory state from disk (§9.3); ``republish``: write the
        ``.meta`` of STATE's ``publishing`` segment again even if it exists (its name
        may not be durable after a publication that failed in this process).

        The reads and decisions are :mod:`.recovery`'s and the publication's; what is
        written, removed and replayed, in this order, is here (the fence first, §16.2)."""
        t0 = time.monotonic()
        rep = RecoveryReport(partition=self.handles.pid)
        self.rows.forget()
        self.sealed.forget()
        state = read_state(self.handles.io, self.handles.state_path)
        self.ledger.restore(RangeSet(tuple(r) for r in state["covered"]), int(state["next_seq"]))
        publication = self.handles.publication
        deleted = deleted_marks(
            state, self.handles.pid, self.handles.deleted, needed=publication.needs_deleted_marks
        )
        self.sealing.check_lease()  # a fenced writer learns it here, before touching anything
        # fence first (§11.3): where the MANIFEST publishes, it is brought to this
        # writer's epoch before anything else is written or removed, so every earlier
        # holder's manifest change fails from here on, and a higher epoch there fences
        # this writer (nothing where the partition's lock is the fence)
        fenced = publication.fence(self.handles.pid)
        publishing = plan_publishing(
            state,
            deleted,
            self.handles.segments,
            self.handles.pid,
            self.handles.state_path,
            republish=republish,
        )
        rep.republished_seq = self.settle_publishing(publishing, state)
        # stale files removed; where the MANIFEST publishes, nothing this writer did not
        # publish (§11.3): another holder's upload may be in flight, and a delete cannot
        # be fenced (:attr:`Publication.keeps_unpublished`)
        cleanup = self.handles.segments.cleanup(self.handles.pid)
        rep.removed_files.extend(cleanup.removed)
        # the MANIFEST (§11.1) the plans go by: the one this writer fenced, as its own
        # publications since left it; or, where the .meta publishes, brought up to date
        manifest = publication.manifest_at_open(self.handles.pid, fenced)
        self.ledger.set_next_seq(next_segment_seq(self.ledger.next_seq, deleted, cleanup, manifest))
        # where transactions are staged (§10.2): those another holder sealed are never
        # sealed again, and this writer's transaction ids start above every id the
        # MANIFEST or a staged object names (no id of another incarnation is reused)
        staged = list_staged(self.handles.segments, self.handles.pid, manifest)
        plan = plan_recovery(
            manifest,
            staged,
            covered=self.ledger.covered,
            unlisted_ceiling=publication.unlisted_txn_ceiling,
        )
        if plan.staged is not None:
            self.sealing.drop_staged(plan.garbage)
        stated_held = held_txns(state, self.handles.state_path)
        self.ledger.limit(wal_limits(self.handles.state_path, state))
        wal = recover_wal(
            self.handles.wal_dir,
            salvage=self.handles.config.salvage,
            io=self.handles.io,
            covered=self.ledger.covered.covers,
            limits=self.ledger.wal_limit,
        )
        rep.wal_files = len(wal.files)
        rep.torn_tails = list(wal.torn)
        rep.records_scanned = sum(len(scan.records) for scan in wal.scans)
        rep.salvaged_skips = sum(len(scan.skipped) for scan in wal.scans)
        # The WAL writer exists before anything is replayed: replaying may finalize
        # (a schema change, a transaction past segment.target_size).
        next_record_seq = plan.next_record_seq(wal, state)
        skipped = next_record_seq > wal.next_record_seq and bool(wal.files)
        if skipped:
            # seqs written once but never durable (or cut as a torn tail) are gone: say
            # so in STATE, or the next recovery takes the gap before the new file for
            # damage (the range holds no record anyone acknowledged)
            self.ledger.cover(wal.next_record_seq, next_record_seq - 1)
        self.ledger.start(
            WalWriter(
                self.handles.wal_dir,
                self.handles.config.wal,
                next_record_seq=next_record_seq,
                io=self.handles.io,
            )
        )
        old = time.monotonic() - self.handles.config.segment.max_open_duration_s
        if plan.staged is not None:
            # before anything is replayed (a replay may seal a segment, and its
            # publication records the txn floor): every staged transaction the MANIFEST
            # does not name is foreign, so the floor stays below it; those the WAL
            # turns out to hold are taken back after the replay
            self.staged.adopt(plan.unsealed, ())
        # the listing above may lag behind the bucket: the floor this writer records
        # stays at the MANIFEST's until a later listing is taken into account
        self.staged.cap(plan.txn_ceiling)
        self.sealing.replaying(True)  # no WAL file is deleted before the whole WAL is replayed
        try:
            self.replay_steps(replay(wal, self.ledger.covered, old), rep, old)
            # named by the MANIFEST, or at or below its txn_floor, or at or below its
            # txn_high and not among its txns_open (sealed or decided against: a
            # retired transaction txns_gone no longer names is never sealed again,
            # §10.2)
            for txn_id in plan.retired(self.rows.pending):
                txn = self.rows.pop(txn_id)  # sealed by another holder: covered
                self.ledger.cover_txn(txn_id, txn)
                rep.sealed_elsewhere += 1
                log.warning(
                    "quiver.recovery.sealed_elsewhere partition=%s txn=%d app=%s version=%d",
                    self.handles.pid,
                    txn_id,
                    txn.app,
                    txn.version,
                )
            # a staged object under the id of a transaction this WAL holds may be another
            # incarnation's (§10.2): this WAL's was then never reported (a stage of it
            # finds the other's bytes), so it is dropped, and the object, foreign, is
            # sealed from the bucket; never this WAL's rows under the other's decision
            held_before = stated_held | set(self.staged.held)
            looked = self.staged_by_others(plan.unsealed, held_before)
            for txn_id in looked.others:
                txn = self.rows.pop(txn_id)
                self.ledger.cover_txn(txn_id, txn)
                rep.discarded_txns += 1
                log.warning(
                    "quiver.recovery.id_reused partition=%s txn=%d app=%s version=%d: the "
                    "staged transaction of this id is another writer's; this WAL's, never "
                    "reported, is dropped",
                    self.handles.pid,
                    txn_id,
                    txn.app,
                    txn.version,
                )
            # held on a damaged object that is gone now: nothing can tie this WAL's rows
            # to the commit record naming the id again; dropped as not committed
            for txn_id in looked.removed:
                self.sealing.drop_held(txn_id)
                rep.discarded_txns += 1
            # held on a damaged object: unresolved, looked at again (§10.2)
            self.staged.hold(looked.damaged, time.monotonic())
            for txn_id in looked.damaged:
                self.sealing.log_held(txn_id)
            before = len(self.rows.pending)
            self.sealing.resolve()
            rep.discarded_txns += before - len(self.rows.pending) if before else 0
        finally:
            self.sealing.replaying(False)
        if self.rows.open:  # recovered data is old: let maintenance finalize it promptly
            self.rows.aged(old)
        rep.pending_txns = len(self.rows.pending)
        rep.held_txns = len(self.staged.held)
        if plan.staged is not None:
            # staged transactions neither this WAL nor the MANIFEST holds (a lost disk,
            # §10.2): this writer holds the lease, so no observer seals them; it seals
            # the committed ones itself (``_seal_foreign``), next look at once
            self.staged.adopt(
                plan.unsealed,
                {*self.rows.pending, *self.rows.open.txns, *self.sealed.unpublished_txns},
            )
        if (
            publishing.action is not Publishing.NONE
            or rep.torn_tails
            or state.get("next_seq") != self.ledger.next_seq
            or "partition" not in state
            or skipped
            or set(self.staged.held) != stated_held
        ):
            self.sealing.write_state(None)
        self.sealing.truncate_wal()
        rep.next_segment_seq = self.ledger.next_seq
        rep.duration_s = time.monotonic() - t0
        if rep.records_scanned or rep.torn_tails or rep.removed_files:
            log.info("quiver.recovery %s", rep.summary())
        return rep

    def staged_by_others(self, unsealed: tuple[int, ...], held: set[int]) -> StagedLook:
        """Of the pending transactions replay opened, those whose id a staged object
        the MANIFEST does not name (``unsealed``) or a damaged one held them before
        (``held``) holds (one GET each): another incarnation's transaction
        (:func:`~.recovery.staged_by_another`), damaged (left for fsck; the transaction
        is held, §10.2), or, for one held before, gone (removed)."""
        ids = sorted((set(unsealed) | held) & set(self.rows.pending))
        look = StagedLook()
        if not ids:
            return look
        objects = staged_objects(self.handles.segments)
        for txn_id in ids:
            try:
                found = read_staged(objects, self.handles.pid, txn_id)
            except CorruptionError as e:
                log.error(
                    "quiver.staged.damaged partition=%s txn=%d: %s", self.handles.pid, txn_id, e
                )
                look.damaged.append(txn_id)
                continue
            if found is None and txn_id in held:
                look.removed.append(txn_id)
            elif staged_by_another(self.rows.pending[txn_id], found):
                look.others.append(txn_id)
        return look

    def settle_publishing(self, plan: PublishingPlan, state: dict) -> int | None:
        """Carry out ``plan`` for the segment ``state`` names as ``publishing`` (§9.3
        step 2; §11.3 on an object root, where a move makes ``state`` name the moved
        segment); returns the seq published, if any."""
        meta = plan.meta
        if plan.action is Publishing.SEALED_ELSEWHERE and meta is not None:
            self.ledger.uncover(minus(self.ledger.covered, meta.wal_ranges))
        if not plan.rewrites_state or meta is None:
            return None
        self.state_durable(state)

        def commit(moved: SegmentMeta) -> None:
            self.ledger.set_next_seq(moved.seq + 1)
            state["next_seq"] = moved.seq + 1
            state["publishing"] = moved.to_body()
            self.state_durable(state)

        try:
            if plan.action is Publishing.OWN:
                own = publish_own(
                    self.handles.segments,
                    self.handles.pid,
                    meta,
                    next_seq=self.ledger.next_seq,
                    commit=commit,
                    txns=plan.txns,
                )
                self.sealing.drop_staged(plan.txns)
                return own.seq
            if plan.action is Publishing.AGAIN:
                self.handles.segments.publish(meta, again=True)
            else:
                self.handles.segments.publish(meta)
            return meta.seq
        except SegmentMissingError as e:
            if e.kind != "missing":
                raise
        listed = (
            self.handles.segments.publication.manifest_copy(self.handles.pid)
            if plan.action is Publishing.OWN
            else None
        )
        if gone_unpublished(
            plan, self.handles.pid, listed, acks_known=self.handles.deleted is not None
        ):
            self.ledger.uncover(minus(self.ledger.covered, meta.wal_ranges))
        return None

    def replay_steps(
        self, steps: Iterator[Txn | Replayed], rep: RecoveryReport, old: float
    ) -> None:
        """Replay the WAL records not yet inside durable segments (§9.3 step 5): the
        steps of :func:`~.recovery.replay` open pending transactions, join them, or
        join the open segment (which may finalize)."""
        for step in steps:
            if isinstance(step, Txn):
                self.rows.begin(step)
                continue
            rep.records_replayed += 1
            rep.rows_replayed += step.batch.num_rows
            if step.discarded:
                continue
            if step.txn_id:
                self.rows.replayed(step.txn_id, (step.seq, step.ingestion_ns, step.batch))
            else:
                self.sealing.admit([(step.seq, step.ingestion_ns, step.batch)], since=old)

    # -- a failed I/O in a process that goes on (§9.4) ------------------------------------
    def ready(self, *, foreground: bool = True) -> None:
        """Make the writer usable for the next operation (caller holds the lock).

        Raises a WAL failure nobody was told of to a foreground caller (once); then
        rebuilds a discarded state through recovery. A background caller (a tick)
        rebuilds too, so what calls that returned wrote is sealed without waiting for a
        caller, but leaves the report of the failure for the next foreground call.
        """
        self.check_open()
        failure = self.life.failure
        if failure.broken is None and self.ledger.wal.failed:
            self.life.poison(
                self.ledger.wal.failure or WalFailedError(0, "wal writer failed"), self.ledger.wal
            )
        e = failure.unreported_wal
        if e is not None and foreground:
            failure.forget_unreported()
            raise e
        if failure.broken is not None:
            unreported = failure.unreported_wal
            try:
                self.rebuild()
            except WalFailedError:
                if foreground:
                    failure.forget_unreported()
                raise
            if not foreground:  # a tick recovers; the report still waits for a caller
                failure.keep_unreported(unreported)

    def rebuild(self) -> None:
        """Recover the partition from disk in place, keeping the partition lock.

        The old WAL writer is closed first (its written records are flushed unless it
        failed: a failed file is never synced again). After a WAL failure the failed
        file is cut for good and the records it may not hold durably are written again
        into a new file (:meth:`FailureState.settle`); recovery then reads the WAL, and
        the records it replays into the open segment are sealed at once.
        """
        failure = self.life.failure
        cause = failure.broken
        try:
            self.ledger.wal.close()  # idempotent; raises once if its last flush fails
        except WalFailedError as e:
            failure.close_failed(e)
            raise
        try:
            failure.settle(
                self.ledger.wal,
                self.handles.wal_dir,
                self.handles.io,
                self.handles.state_path,
                self.handles.config.wal,
            )
            self.report = self.recover(republish=True)
            if failure.seal_on_recovery and self.rows.open:
                self.sealing.finalize()
        except BaseException as e:
            failure.recovery_failed(e)
            try:
                self.ledger.wal.close()
            except Exception as close_error:  # never opened a file: nothing to lose
                log.warning(
                    "quiver.writer.close_failed partition=%s: %s", self.handles.pid, close_error
                )
            raise
        failure.recovered()
        log.warning(
            "quiver.writer.recovered partition=%s after=%s %s",
            self.handles.pid,
            cause,
            self.report.summary(),
        )

    def check_open(self) -> None:
        if self.life.closed:
            raise StoreClosedError(f"partition {self.handles.pid} writer is closed")
