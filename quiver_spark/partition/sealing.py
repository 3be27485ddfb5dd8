"""Admitting rows into a partition writer's open segment and sealing it into a
published segment (ARCHITECTURE.md §7.2, §9, §12.4, §12.6).

:class:`Sealing` is the writer's collaborator every other part goes through: on the
:class:`~.state.PartitionState` it is given, it admits committed transactions into
the open segment (:meth:`~Sealing.resolve`, :meth:`~Sealing.admit`) and finalizes it
(the ``.arrow``, STATE's commit point, the publication, the WAL truncated); a failure
midway discards the state (§7.4). Where the two kinds of root differ it asks the
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

from ..errors import CorruptionError, LeaseLostError, LostRaceError, QuiverError, SeqTakenError
from ..ranges import ranges_of
from ..segment import SegmentMeta
from ..staging import read_staged
from .model import RESOLVE_CAP_S, RESOLVE_GRACE_S, OpenSegment, Txn
from .publication import MOVES, check_lease, publish_own
from .recovery import staged_by_another
from .staged import staged_objects, staged_schema
from .staged_seal import seal_one
from .state import PartitionState

log = logging.getLogger(__name__)


class Sealing:
    """A partition writer's admission of rows and its finalize, on the state it is given."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state

    # -- admission ---------------------------------------------------------------------
    def resolve(self, *, backoff: bool = False) -> None:
        """Move committed transactions into the open segment; drop losers.

        ``backoff`` (the maintenance tick's calls, where each look is a request:
        :attr:`CommitLog.lookups_back_off`): a transaction undecided
        :data:`RESOLVE_GRACE_S` after its first record is looked at again after 1 s,
        then 2, 4... at most every :data:`RESOLVE_CAP_S` (a batch never rerun stays
        pending for good)."""
        now = time.monotonic()
        patient = backoff and self.state.commits.lookups_back_off
        for gone in set(self.state.recheck) - set(self.state.pending):
            del self.state.recheck[gone]
        held = self.state.staged.held
        for txn_id in sorted(self.state.pending):
            txn = self.state.pending[txn_id]
            if txn_id in held:  # its staged object is damaged: unresolved (§12.6)
                continue
            if patient and now < self.state.recheck.get(txn_id, (now, 0.0))[0]:
                continue
            rec = self.state.commits.get(txn.app, txn.version)
            if rec is None:
                if patient and now - (txn.first_mono or now) >= RESOLVE_GRACE_S:
                    interval = min(
                        RESOLVE_CAP_S, max(1.0, 2 * self.state.recheck.get(txn_id, (0, 0.5))[1])
                    )
                    self.state.recheck[txn_id] = (now + interval, interval)
                continue
            del self.state.pending[txn_id]
            self.state.recheck.pop(txn_id, None)
            if (self.state.pid, txn_id) in rec.winners:
                # the REC_TXN marker is covered with (never before) its data
                self.admit(txn.records, since=txn.first_mono, marker=txn_id)
            else:
                # a loser's records are never needed again: covered, so a recovery that
                # finds them after the marker's file was deleted does not mistake them
                # for damage (persisted with the next STATE write, before any unlink)
                for seq in (txn_id, *(r[0] for r in txn.records)):
                    self.state.covered.add(seq, seq)
                log.info(
                    "quiver.txn.discard partition=%s txn=%d app=%s version=%d",
                    self.state.pid,
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
        discarded and the next call replays them from the WAL (§7.4).
        """
        self.state.admitting = {seq for seq, _, _ in records}
        if marker is not None:
            self.state.admitting.add(marker)
        target = self.state.config.segment.target_size_bytes
        # where a publication names its transactions, a transaction's rows stay in one
        # segment (but for a schema change within it), so an entry naming it holds all
        # of it (§12.6)
        whole = marker is not None and self.state.publication.names_txns
        if whole and marker is not None:
            records = staged_schema(self.state.pid, marker, records)
        try:
            if (
                whole
                and self.state.open
                and (self.state.open.nbytes + sum(b.nbytes for _, _, b in records) >= target)
            ):
                self.finalize()
            for seq, ns, batch in records:
                schema = self.state.open.schema
                if schema is not None and not batch.schema.equals(schema):
                    self.finalize()
                if marker is not None and marker not in self.state.open.txns:
                    self.state.open.txns.append(marker)
                self.state.open.add(seq, ns, batch, since)
                self.state.admitting.discard(seq)
                if not whole and self.state.open.nbytes >= target:
                    self.finalize()
            if marker is not None:
                self.state.open.seqs.append(marker)
            if whole and self.state.open.nbytes >= target:
                self.finalize()
        except BaseException as e:
            self.state.poison(e)
            raise
        finally:
            self.state.admitting = set()

    # -- finalize and publication ------------------------------------------------------
    def check_lease(self) -> None:
        """Before a publication: the writer still holds its lease, if it has one
        (:func:`~.publication.check_lease`: a lost one raises LeaseLostError, one
        short of time is renewed first)."""
        check_lease(self.state.lease)

    def drop_staged(self, txns: tuple[int, ...]) -> None:
        """Object root: remove the staged objects of transactions now in the MANIFEST
        (best effort, :meth:`StagedBook.drop`)."""
        self.state.staged.drop(txns)

    def publish_pending(self) -> None:
        """Publish the segment past the commit point; idempotent, retried until it lands.

        If publication fails (say an object store answered with an error after the
        copy took effect, or the directory fsync after the rename failed), the rows
        already belong to that segment, but whether its ``.meta`` is durable is
        unknown: the state is discarded and the next call's recovery writes the same
        ``.meta`` again, through a new file, before STATE stops naming it.
        """
        if self.state.unpublished is not None:
            try:
                self.check_lease()
                retirement = self.state.txn_retirement()
                self.state.unpublished = publish_own(
                    self.state.segments,
                    self.state.pid,
                    self.state.unpublished,
                    next_seq=self.state.next_seq,
                    commit=self.moved,
                    txns=self.state.unpublished_txns,
                    retirement=retirement,
                )
            except BaseException as e:
                self.state.poison(e)
                raise
            self.state.last_published = self.state.unpublished
            self.state.unpublished = None
            self.drop_staged(self.state.unpublished_txns)
            self.state.unpublished_txns = ()

    def seal_foreign(self) -> None:
        """Object root: seal the committed staged transactions this writer's WAL does
        not hold (another incarnation's, whose disk was lost) as a sealer would
        (§12.6), at this writer's epoch, and drop those decided without them; when to
        look at each again is the :class:`StagedBook`'s. Runs only with nothing past
        the commit point (``unpublished`` is None)."""
        staged = self.state.staged
        if not staged.foreign or self.state.unpublished is not None:
            return  # a POSIX root's writer stages nothing: none is ever foreign
        objects = staged_objects(self.state.segments)
        now = time.monotonic()
        garbage: list[int] = []
        for txn_id in staged.due(now):
            done = seal_one(
                objects,
                self.state.commits,
                self.state.segments,
                self.state.config.segment,
                self.state.pid,
                txn_id,
                lease=self.state.lease,
                check_lease=self.check_lease,
                log=log,
                first_seq=self.state.next_seq,
            )
            if done.meta is not None:
                self.state.next_seq = max(self.state.next_seq, done.meta.seq + 1)
            if staged.looked(txn_id, done, now):
                garbage.append(txn_id)
        staged.drop_garbage(garbage)

    def look_held(self) -> None:
        """Object root: look again (one GET each, every :data:`RESOLVE_CAP_S`) at the
        damaged staged objects under the ids of pending transactions this writer holds
        unresolved (§12.6). Still damaged: held. Repaired: another incarnation's
        transaction drops this WAL's (the object, foreign, is sealed from the bucket);
        this WAL's own is resolved by its commit record as before. Removed: this WAL's
        transaction is dropped as not committed (nothing can tie its rows to the commit
        record naming the id again)."""
        staged = self.state.staged
        if not staged.held:
            return
        objects = staged_objects(self.state.segments)
        now = time.monotonic()
        for txn_id in staged.held_due(now):
            txn = self.state.pending.get(txn_id)
            if txn is None:
                del staged.held[txn_id]
                continue
            try:
                found = read_staged(objects, self.state.pid, txn_id)
            except CorruptionError as e:
                log.error(
                    "quiver.staged.damaged partition=%s txn=%d: %s", self.state.pid, txn_id, e
                )
                staged.still_damaged(txn_id, now)
                continue
            if found is None:
                self.drop_held(txn_id)
            elif staged_by_another(txn, found):
                del staged.held[txn_id]
                self.drop_txn(txn_id)
                staged.note(txn_id)
                log.warning(
                    "quiver.staged.repaired partition=%s txn=%d: the staged transaction of "
                    "this id is another writer's; this WAL's, never reported, is dropped",
                    self.state.pid,
                    txn_id,
                )
            else:
                del staged.held[txn_id]
                log.warning(
                    "quiver.staged.repaired partition=%s txn=%d: the staged transaction of "
                    "this id is this WAL's; resolved by its commit record",
                    self.state.pid,
                    txn_id,
                )

    def drop_held(self, txn_id: int) -> None:
        """Held ``txn_id``'s damaged staged object is gone: this WAL's transaction is
        dropped as not committed (§12.6)."""
        self.state.staged.held.pop(txn_id, None)
        txn = self.drop_txn(txn_id)
        log.warning(
            "quiver.staged.removed partition=%s txn=%d app=%s version=%d: the damaged staged "
            "object of this id was removed; this WAL's transaction, never tied to the commit "
            "record naming the id, is dropped as not committed",
            self.state.pid,
            txn_id,
            txn.app,
            txn.version,
        )

    def log_held(self, txn_id: int) -> None:
        txn = self.state.pending[txn_id]
        log.warning(
            "quiver.staged.held partition=%s txn=%d app=%s version=%d: the staged object of "
            "this id is damaged; this WAL's transaction stays pending, unresolved, until the "
            "object is repaired or removed (removing it drops this transaction)",
            self.state.pid,
            txn_id,
            txn.app,
            txn.version,
        )

    def drop_txn(self, txn_id: int) -> Txn:
        """Drop pending ``txn_id``: its records are covered, never sealed."""
        txn = self.state.pending.pop(txn_id)
        self.state.recheck.pop(txn_id, None)
        for seq in (txn_id, *(r[0] for r in txn.records)):
            self.state.covered.add(seq, seq)
        return txn

    def moved(self, meta: SegmentMeta) -> None:
        """Object root: this writer's segment now goes out as ``meta`` (its seq was
        taken by another holder): STATE names it, its new commit point."""
        self.state.next_seq = meta.seq + 1
        self.state.unpublished = meta
        self.state.write_state(meta)

    def finalize(self) -> SegmentMeta | None:
        self.publish_pending()
        # never while recovering: the WAL not replayed yet may hold a foreign-looking
        # transaction itself (sealed from both, its rows would be read twice)
        if (self.state.staged.foreign or self.state.staged.held) and not self.state.recovering:
            try:
                self.look_held()
                self.seal_foreign()
            except LeaseLostError as e:
                self.state.poison(e)
                raise
            except (QuiverError, OSError) as e:  # kept and retried; never raised into a write
                self.state.maintenance_error = e
                log.error("quiver.staged.seal_failed partition=%s: %s", self.state.pid, e)
        seg = self.state.open
        batches = seg.batches
        if not batches:
            if seg.seqs:  # only transaction markers: nothing to publish, but covered
                for lo, hi in ranges_of(seg.seqs):
                    self.state.covered.add(lo, hi)
                self.state.open = OpenSegment()
            return None
        seq = self.state.next_seq
        txns = tuple(seg.txns) if self.state.publication.names_txns else ()
        try:
            self.check_lease()
        except LeaseLostError as e:
            self.state.poison(e)
            raise
        # A failure here changes nothing recovery would not redo: the rows stay open
        # and the retry writes the same seq again (any orphan .arrow is replaced).
        for _ in range(MOVES):
            try:
                meta = self.state.segments.write_data(
                    self.state.pid,
                    seq,
                    batches,
                    min_ingestion_ns=seg.min_ns,
                    max_ingestion_ns=seg.max_ns,
                    wal_ranges=ranges_of(seg.seqs),
                    event_time_column=self.state.config.segment.event_time_column,
                    target_batch_rows=self.state.config.segment.target_batch_rows,
                )
                break
            except SeqTakenError:
                # object root: another lease holder's objects are under this seq; it
                # is recorded void (fenced: LeaseLostError) and the next one is used
                try:
                    self.state.segments.publication.void(self.state.pid, seq)
                except BaseException as e:
                    self.state.poison(e)
                    raise
                seq += 1
                self.state.next_seq = seq
        else:
            raise LostRaceError(
                self.state.pid,
                f"partition {self.state.pid}: {MOVES} seqs in a row taken up to {seq}",
                attempts=MOVES,
            )
        try:
            for lo, hi in meta.wal_ranges:
                self.state.covered.add(lo, hi)
            self.state.next_seq = seq + 1
            self.state.unpublished_txns = txns  # STATE names them with the segment
            # commit point: these rows now belong to ``meta``. A failed write may
            # have replaced STATE all the same (its directory fsync failed after the
            # rename): only recovery knows, so the state is discarded (§7.4).
            self.state.write_state(meta)
            self.state.open = OpenSegment()
            self.state.unpublished = meta
            self.publish_pending()
            meta = self.state.last_published or meta  # moved to another seq on an object root
            self.state.finalized_total += 1
            self.state.last_finalized = meta
            log.info(
                "quiver.segment.finalize partition=%s seq=%d rows=%d bytes=%d",
                self.state.pid,
                seq,
                meta.rows,
                meta.size_bytes,
            )
            self.state.wal.rotate()
            if not self.state.recovering:  # recovery truncates once the whole WAL is replayed
                self.truncate_wal()
        except BaseException as e:
            self.state.poison(e)
            raise
        return meta

    def truncate_wal(self) -> None:
        """Delete WAL files whose every record is in a durable segment or discarded."""
        undone = sorted(
            [*self.state.open.seqs, *self.state.admitting]
            + [
                s
                for t in self.state.pending.values()
                for s in (t.txn_id, *(r[0] for r in t.records))
            ]
        )
        files = self.state.wal.files()
        current = self.state.wal.current_path
        doomed = []
        for i, info in enumerate(files):
            if info.path == current:
                continue
            last = files[i + 1].first_seq - 1 if i + 1 < len(files) else self.state.wal.next_seq - 1
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
                self.state.covered.add(info.first_seq, (nxt or self.state.wal.next_seq) - 1)
            self.state.write_state(self.state.unpublished)
            self.state.wal.delete_files(doomed)
            log.debug("quiver.wal.truncate partition=%s files=%d", self.state.pid, len(doomed))
        remaining = self.state.wal.files()
        if remaining:
            self.state.covered.drop_below(remaining[0].first_seq)
