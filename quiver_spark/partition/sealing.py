"""Admitting rows into a partition writer's open segment and sealing it into a
published segment (ARCHITECTURE.md §9.2, §10, §11.3, §10.2).

:class:`Sealing` is the writer's collaborator every other part goes through: on the
groups of the writer's state it is given (:mod:`.state`), it admits committed
transactions into the open segment (:meth:`~Sealing.resolve`, :meth:`~Sealing.admit`)
and finalizes it (the ``.arrow``, STATE's commit point, the publication, the WAL
truncated); a failure midway discards the state (§9.4). Where the two kinds of root differ it asks the
location's publication (:class:`~quiver_spark.segment.publication.Publication`:
whether a publication names its transactions) and checks the lease the root kind gave
the state (none on a POSIX root); it never asks which kind of root it is on. The
rebuild (:class:`~.rebuild.Rebuild`) and the live writer
(:class:`~.writer.PartitionWriter`) call it; it calls neither.
"""

from __future__ import annotations

import bisect
import logging
import time

import pyarrow as pa

from ..control.txn_retirement import TxnRetirement
from ..errors import CorruptionError, LeaseLostError, LostRaceError, QuiverError, SeqTakenError
from ..ranges import ranges_of
from ..segment import SegmentMeta
from ..staging import read_staged
from .model import RESOLVE_CAP_S, RESOLVE_GRACE_S, Txn
from .publication import MOVES, check_lease, publish_own
from .recovery import staged_by_another
from .staged import StagedBook, staged_objects, staged_schema
from .staged_seal import seal_one
from .state import Lifecycle, PartitionHandles, SealedSegments, UnsealedRows, WalLedger

log = logging.getLogger(__name__)


class Sealing:
    """A partition writer's admission of rows and its finalize, on the groups of its
    state it is given: every one of them (it moves rows from the unsealed ones to the
    sealed, writes STATE, and discards the state after a failure midway), the config
    changed by the writer alone."""

    def __init__(
        self,
        handles: PartitionHandles,
        ledger: WalLedger,
        rows: UnsealedRows,
        sealed: SealedSegments,
        life: Lifecycle,
        staged: StagedBook,
    ) -> None:
        self.handles = handles
        self.ledger = ledger
        self.rows = rows
        self.sealed = sealed
        self.life = life
        self.staged = staged
        self.recovering = False
        """A recovery is replaying the WAL through this sealing (:meth:`replaying`):
        no WAL file is deleted before the whole WAL is replayed, and no foreign staged
        transaction is sealed (the WAL not replayed yet may hold it)."""

    def replaying(self, recovering: bool) -> None:
        """A recovery starts (True) or ends (False) replaying the WAL through this
        sealing."""
        self.recovering = recovering

    def poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`Lifecycle.poison`, §9.4)."""
        self.life.poison(e, self.ledger.wal)

    def write_state(self, publishing: SegmentMeta | None) -> None:
        """Replace STATE atomically (§6.2): ``publishing``, the segment past the commit
        point, or None (:meth:`WalLedger.write_state`)."""
        self.ledger.write_state(publishing, self.sealed.unpublished_txns, self.staged.held)

    def txn_retirement(self) -> TxnRetirement:
        """The transactions to record retired where publications name transactions
        (§10.2; recorded nowhere else): every id up to the floor, below the lowest
        transaction this writer has not sealed yet (pending, committed in the open
        segment, being admitted, or another incarnation's it looks at), else its highest
        id; up to that id, those not sealed yet open; capped as :meth:`StagedBook.floor`
        says."""
        return self.staged.floor(
            self.rows.writing(), self.sealed.unpublished_txns, self.ledger.wal.next_seq - 1
        )

    # -- admission ---------------------------------------------------------------------
    def resolve(self, *, backoff: bool = False) -> None:
        """Move committed transactions into the open segment; drop losers.

        ``backoff`` (the maintenance tick's calls, where each look is a request:
        :attr:`CommitLog.lookups_back_off`): a transaction undecided
        :data:`RESOLVE_GRACE_S` after its first record is looked at again after 1 s,
        then 2, 4... at most every :data:`RESOLVE_CAP_S` (a batch never rerun stays
        pending for good)."""
        now = time.monotonic()
        patient = backoff and self.handles.commits.lookups_back_off
        self.rows.forget_decided_looks()
        held = self.staged.held
        for txn_id in sorted(self.rows.pending):
            txn = self.rows.pending[txn_id]
            if txn_id in held:  # its staged object is damaged: unresolved (§10.2)
                continue
            if patient and now < self.rows.recheck.get(txn_id, (now, 0.0))[0]:
                continue
            rec = self.handles.commits.get(txn.app, txn.version)
            if rec is None:
                if patient and now - (txn.first_mono or now) >= RESOLVE_GRACE_S:
                    interval = min(
                        RESOLVE_CAP_S, max(1.0, 2 * self.rows.recheck.get(txn_id, (0, 0.5))[1])
                    )
                    self.rows.look_again(txn_id, now + interval, interval)
                continue
            self.rows.take(txn_id)
            if (self.handles.pid, txn_id) in rec.winners:
                # the REC_TXN marker is covered with (never before) its data
                self.admit(txn.records, since=txn.first_mono, marker=txn_id)
            else:
                # a loser's records are never needed again: covered, so a recovery that
                # finds them after the marker's file was deleted does not mistake them
                # for damage (persisted with the next STATE write, before any unlink)
                self.ledger.cover_txn(txn_id, txn)
                log.info(
                    "quiver.txn.discard partition=%s txn=%d app=%s version=%d",
                    self.handles.pid,
                    txn_id,
                    txn.app,
                    txn.version,
                )

    def admit(
        self,
        records: list[tuple[int, int, pa.RecordBatch]],
        since: float | None = None,
        marker: int | None = None,
    ) -> None:
        """Add records to the open segment; ``since``: when they were appended (monotonic).

        ``marker`` is the seq of the transaction's ``REC_TXN`` record: it joins the open
        segment after the last of its records, so a segment never covers a marker
        before all its data (recovery resolves uncovered records through the marker).
        Records not yet admitted stay in ``admitting`` so a finalize triggered midway
        (schema change, ``segment.target_size``) keeps their WAL files. A finalize that
        fails midway leaves the rest of the records nowhere in memory: the state is
        discarded and the next call replays them from the WAL (§9.4).
        """
        self.rows.admitting_seqs(
            [*(seq for seq, _, _ in records), *(() if marker is None else (marker,))]
        )
        target = self.handles.config.segment.target_size_bytes
        # where a publication names its transactions, a transaction's rows stay in one
        # segment (but for a schema change within it), so an entry naming it holds all
        # of it (§10.2)
        whole = marker is not None and self.handles.publication.names_txns
        if whole and marker is not None:
            records = staged_schema(self.handles.pid, marker, records)
        try:
            if (
                whole
                and self.rows.open
                and (self.rows.open.nbytes + sum(b.nbytes for _, _, b in records) >= target)
            ):
                self.finalize()
            for seq, ns, batch in records:
                schema = self.rows.open.schema
                if schema is not None and not batch.schema.equals(schema):
                    self.finalize()
                if marker is not None:
                    self.rows.holds_txn(marker)
                self.rows.add(seq, ns, batch, since)
                self.rows.admitted(seq)
                if not whole and self.rows.open.nbytes >= target:
                    self.finalize()
            if marker is not None:
                self.rows.add_marker(marker)
            if whole and self.rows.open.nbytes >= target:
                self.finalize()
        except BaseException as e:
            self.poison(e)
            raise
        finally:
            self.rows.admitted_all()

    # -- finalize and publication ------------------------------------------------------
    def check_lease(self) -> None:
        """Before a publication: the writer still holds its lease, if it has one
        (:func:`~.publication.check_lease`: a lost one raises LeaseLostError, one
        short of time is renewed first)."""
        check_lease(self.handles.lease)

    def drop_staged(self, txns: tuple[int, ...]) -> None:
        """Object root: remove the staged objects of transactions now in the MANIFEST
        (best effort, :meth:`StagedBook.drop`)."""
        self.staged.drop(txns)

    def publish_pending(self) -> None:
        """Publish the segment past the commit point; idempotent, retried until it lands.

        If publication fails (say an object store answered with an error after the
        copy took effect, or the directory fsync after the rename failed), the rows
        already belong to that segment, but whether its ``.meta`` is durable is
        unknown: the state is discarded and the next call's recovery writes the same
        ``.meta`` again, through a new file, before STATE stops naming it.
        """
        if self.sealed.unpublished is not None:
            try:
                self.check_lease()
                retirement = self.txn_retirement()
                published = publish_own(
                    self.handles.segments,
                    self.handles.pid,
                    self.sealed.unpublished,
                    next_seq=self.ledger.next_seq,
                    commit=self.moved,
                    txns=self.sealed.unpublished_txns,
                    retirement=retirement,
                )
                self.sealed.committed(published)
            except BaseException as e:
                self.poison(e)
                raise
            self.sealed.published()
            self.drop_staged(self.sealed.unpublished_txns)
            self.sealed.naming(())

    def seal_foreign(self) -> None:
        """Object root: seal the committed staged transactions this writer's WAL does
        not hold (another incarnation's, whose disk was lost) as a sealer would
        (§10.2), at this writer's epoch, and drop those decided without them; when to
        look at each again is the :class:`StagedBook`'s. Runs only with nothing past
        the commit point (``unpublished`` is None)."""
        staged = self.staged
        if not staged.foreign or self.sealed.unpublished is not None:
            return  # a POSIX root's writer stages nothing: none is ever foreign
        objects = staged_objects(self.handles.segments)
        now = time.monotonic()
        garbage: list[int] = []
        for txn_id in staged.due(now):
            done = seal_one(
                objects,
                self.handles.commits,
                self.handles.segments,
                self.handles.config.segment,
                self.handles.pid,
                txn_id,
                lease=self.handles.lease,
                check_lease=self.check_lease,
                log=log,
                first_seq=self.ledger.next_seq,
            )
            if done.meta is not None:
                self.ledger.set_next_seq(max(self.ledger.next_seq, done.meta.seq + 1))
            if staged.looked(txn_id, done, now):
                garbage.append(txn_id)
        staged.drop_garbage(garbage)

    def look_held(self) -> None:
        """Object root: look again (one GET each, every :data:`RESOLVE_CAP_S`) at the
        damaged staged objects under the ids of pending transactions this writer holds
        unresolved (§10.2). Still damaged: held. Repaired: another incarnation's
        transaction drops this WAL's (the object, foreign, is sealed from the bucket);
        this WAL's own is resolved by its commit record as before. Removed: this WAL's
        transaction is dropped as not committed (nothing can tie its rows to the commit
        record naming the id again)."""
        staged = self.staged
        if not staged.held:
            return
        objects = staged_objects(self.handles.segments)
        now = time.monotonic()
        for txn_id in staged.held_due(now):
            txn = self.rows.pending.get(txn_id)
            if txn is None:
                staged.release(txn_id)
                continue
            try:
                found = read_staged(objects, self.handles.pid, txn_id)
            except CorruptionError as e:
                log.error(
                    "quiver.staged.damaged partition=%s txn=%d: %s", self.handles.pid, txn_id, e
                )
                staged.still_damaged(txn_id, now)
                continue
            if found is None:
                self.drop_held(txn_id)
            elif staged_by_another(txn, found):
                staged.release(txn_id)
                self.drop_txn(txn_id)
                staged.note(txn_id)
                log.warning(
                    "quiver.staged.repaired partition=%s txn=%d: the staged transaction of "
                    "this id is another writer's; this WAL's, never reported, is dropped",
                    self.handles.pid,
                    txn_id,
                )
            else:
                staged.release(txn_id)
                log.warning(
                    "quiver.staged.repaired partition=%s txn=%d: the staged transaction of "
                    "this id is this WAL's; resolved by its commit record",
                    self.handles.pid,
                    txn_id,
                )

    def drop_held(self, txn_id: int) -> None:
        """Held ``txn_id``'s damaged staged object is gone: this WAL's transaction is
        dropped as not committed (§10.2)."""
        self.staged.release(txn_id)
        txn = self.drop_txn(txn_id)
        log.warning(
            "quiver.staged.removed partition=%s txn=%d app=%s version=%d: the damaged staged "
            "object of this id was removed; this WAL's transaction, never tied to the commit "
            "record naming the id, is dropped as not committed",
            self.handles.pid,
            txn_id,
            txn.app,
            txn.version,
        )

    def log_held(self, txn_id: int) -> None:
        txn = self.rows.pending[txn_id]
        log.warning(
            "quiver.staged.held partition=%s txn=%d app=%s version=%d: the staged object of "
            "this id is damaged; this WAL's transaction stays pending, unresolved, until the "
            "object is repaired or removed (removing it drops this transaction)",
            self.handles.pid,
            txn_id,
            txn.app,
            txn.version,
        )

    def drop_txn(self, txn_id: int) -> Txn:
        """Drop pending ``txn_id``: its records are covered, never sealed."""
        txn = self.rows.take(txn_id)
        self.ledger.cover_txn(txn_id, txn)
        return txn

    def moved(self, meta: SegmentMeta) -> None:
        """Object root: this writer's segment now goes out as ``meta`` (its seq was
        taken by another holder): STATE names it, its new commit point."""
        self.ledger.set_next_seq(meta.seq + 1)
        self.sealed.committed(meta)
        self.write_state(meta)

    def finalize(self) -> SegmentMeta | None:
        self.publish_pending()
        # never while recovering: the WAL not replayed yet may hold a foreign-looking
        # transaction itself (sealed from both, its rows would be read twice)
        if (self.staged.foreign or self.staged.held) and not self.recovering:
            try:
                self.look_held()
                self.seal_foreign()
            except LeaseLostError as e:
                self.poison(e)
                raise
            except (QuiverError, OSError) as e:  # kept and retried; never raised into a write
                self.life.deferred(e)
                log.error("quiver.staged.seal_failed partition=%s: %s", self.handles.pid, e)
        seg = self.rows.open
        batches = seg.batches
        if not batches:
            if seg.seqs:  # only transaction markers: nothing to publish, but covered
                for lo, hi in ranges_of(seg.seqs):
                    self.ledger.cover(lo, hi)
                self.rows.sealed()
            return None
        seq = self.ledger.next_seq
        txns = tuple(seg.txns) if self.handles.publication.names_txns else ()
        try:
            self.check_lease()
        except LeaseLostError as e:
            self.poison(e)
            raise
        # A failure here changes nothing recovery would not redo: the rows stay open
        # and the retry writes the same seq again (any orphan .arrow is replaced).
        for _ in range(MOVES):
            try:
                meta = self.handles.segments.write_data(
                    self.handles.pid,
                    seq,
                    batches,
                    min_ingestion_ns=seg.min_ns,
                    max_ingestion_ns=seg.max_ns,
                    wal_ranges=ranges_of(seg.seqs),
                    event_time_column=self.handles.config.segment.event_time_column,
                    target_batch_rows=self.handles.config.segment.target_batch_rows,
                )
                break
            except SeqTakenError:
                # object root: another lease holder's objects are under this seq; it
                # is recorded void (fenced: LeaseLostError) and the next one is used
                try:
                    self.handles.segments.publication.void(self.handles.pid, seq)
                except BaseException as e:
                    self.poison(e)
                    raise
                seq += 1
                self.ledger.set_next_seq(seq)
        else:
            raise LostRaceError(
                self.handles.pid,
                f"partition {self.handles.pid}: {MOVES} seqs in a row taken up to {seq}",
                attempts=MOVES,
            )
        try:
            for lo, hi in meta.wal_ranges:
                self.ledger.cover(lo, hi)
            self.ledger.set_next_seq(seq + 1)
            self.sealed.naming(txns)  # STATE names them with the segment
            # commit point: these rows now belong to ``meta``. A failed write may
            # have replaced STATE all the same (its directory fsync failed after the
            # rename): only recovery knows, so the state is discarded (§9.4).
            self.write_state(meta)
            self.rows.sealed()
            self.sealed.committed(meta)
            self.publish_pending()
            meta = self.sealed.last_published or meta  # moved to another seq on an object root
            self.sealed.finalized(meta)
            log.info(
                "quiver.segment.finalize partition=%s seq=%d rows=%d bytes=%d",
                self.handles.pid,
                seq,
                meta.rows,
                meta.size_bytes,
            )
            self.ledger.wal.rotate()
            if not self.recovering:  # recovery truncates once the whole WAL is replayed
                self.truncate_wal()
        except BaseException as e:
            self.poison(e)
            raise
        return meta

    def truncate_wal(self) -> None:
        """Delete WAL files whose every record is in a durable segment or discarded."""
        undone = self.rows.undone()
        files = self.ledger.wal.files()
        current = self.ledger.wal.current_path
        doomed = []
        for i, info in enumerate(files):
            if info.path == current:
                continue
            last = (
                files[i + 1].first_seq - 1 if i + 1 < len(files) else self.ledger.wal.next_seq - 1
            )
            j = bisect.bisect_left(undone, info.first_seq)
            if j < len(undone) and undone[j] <= last:
                continue
            doomed.append(info)
        if doomed:
            # The deleted files' whole seq ranges (schema and marker records included)
            # become covered, durably before the unlink: recovery then knows the gap a
            # deleted file leaves between two kept ones is not damage.
            for info in doomed:
                nxt = next((f.first_seq for f in files if f.first_seq > info.first_seq), None)
                self.ledger.cover(info.first_seq, (nxt or self.ledger.wal.next_seq) - 1)
            self.write_state(self.sealed.unpublished)
            self.ledger.wal.delete_files(doomed)
            log.debug("quiver.wal.truncate partition=%s files=%d", self.handles.pid, len(doomed))
        remaining = self.ledger.wal.files()
        if remaining:
            self.ledger.drop_covered_below(remaining[0].first_seq)
