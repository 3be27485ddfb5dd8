"""Rebuilding a partition writer's in-memory state from disk.

Recovery at open (ARCHITECTURE.md §7.3): STATE, the segment location and the ack
log's ``DELETED`` facts give the segment seq floor and the WAL ranges already inside
segments; the WAL records past them are replayed into the open segment and the
pending transactions. After a failed I/O in a process that goes on (§7.4) the
in-memory state is discarded and the next call rebuilds it through the same recovery,
in place, keeping the partition lock; a failed WAL file is cut at its last durable,
acknowledged record first.

:class:`PartitionRecovery` is the base of
:class:`~quiver_spark.partition.writer.PartitionWriter`: it declares the state both
share and leaves to the writer what replay admits into (``_admit``, ``_resolve``,
``_finalize``, ``_truncate_wal``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import pyarrow as pa

from .. import format as fmt
from ..config import StoreConfig
from ..control.lease import Lease
from ..errors import CorruptionError, SegmentMissingError, SeqTakenError, WalFailedError
from ..fs import FileIO
from ..ranges import RangeSet
from ..seams import NO_DELETIONS, DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..staging import staged_ids
from ..wal import (
    WalCarry,
    WalDecoder,
    WalRecovery,
    WalWriter,
    decode_txn,
    list_wal_files,
    recover_wal,
    wal_limits,
)
from .model import OpenSegment, RecoveryReport, Txn
from .staged import StagedBook

log = logging.getLogger(__name__)


def _minus(covered: RangeSet, ranges: Iterable[tuple[int, int]]) -> RangeSet:
    """``covered`` without ``ranges`` (inclusive seq ranges)."""
    pieces = list(covered)
    for a, b in ranges:
        nxt: list[tuple[int, int]] = []
        for x, y in pieces:
            if b < x or a > y:
                nxt.append((x, y))
                continue
            if x < a:
                nxt.append((x, a - 1))
            if b < y:
                nxt.append((b + 1, y))
        pieces = nxt
    return RangeSet(pieces)


ACT_MARGIN = 0.5
"""A writer on an object root publishes without a request only while more than this
share of its lease's ttl is left since its last renewal; otherwise it renews first (§12.3)."""
_MOVES = 16
"""Seqs in a row found taken by another lease holder before a publication gives up."""


class PartitionRecovery:
    """The state of a partition writer and how it is rebuilt from disk."""

    pid: str
    config: StoreConfig
    lease: Lease | None
    segments: SegmentLocation
    io: FileIO
    wal_dir: str
    state_path: str
    wal: WalWriter
    recovery: RecoveryReport
    _deleted: DeletedSegments | None
    _open: OpenSegment
    _pending: dict[int, Txn]
    _unpublished: SegmentMeta | None
    _unpublished_txns: tuple[int, ...]
    _admitting: set[int]
    _covered: RangeSet
    _next_seq: int
    _recovering: bool
    _broken: BaseException | None
    _unreported_wal: BaseException | None
    _seal_on_recovery: bool
    _wal_limit: dict[int, int]
    _drop_from: int | None
    _cut: tuple[int, list[WalCarry]] | None
    _cut_settled: bool
    _staged: StagedBook

    # -- what replay admits into: the live writer's ---------------------------------------
    def _admit(
        self,
        records: list[tuple[int, int, pa.RecordBatch]],
        since: float | None = None,
        marker: int | None = None,
    ) -> None:
        raise NotImplementedError

    def _resolve(self) -> None:
        raise NotImplementedError

    def _finalize(self) -> SegmentMeta | None:
        raise NotImplementedError

    def _truncate_wal(self) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    # -- publication on an object root (§12.4) --------------------------------------------
    def _check_lease(self) -> None:
        """Before a publication on an object root: the writer still holds its lease.
        A lost one raises LeaseLostError; one with less than half its ttl left since
        its last renewal (the process was paused, its keeper fell behind) is renewed
        first, which raises LeaseLostError when another holder took it over."""
        lease = self.lease
        if lease is None:
            return
        keeper = lease.keeper
        if keeper is not None and keeper.error is not None:
            raise keeper.error
        if lease.lost() or lease.remaining() < lease.ttl_s * ACT_MARGIN:
            lease.renew()

    def _drop_staged(self, txns: tuple[int, ...]) -> None:
        """Object root: remove the staged objects of transactions now in the MANIFEST
        (best effort, :meth:`StagedBook.drop`)."""
        self._staged.drop(txns)

    def _publish_own(
        self,
        meta: SegmentMeta,
        commit: Callable[[SegmentMeta], None],
        txns: tuple[int, ...] = (),
        txn_floor: int = 0,
    ) -> SegmentMeta:
        """Publish this writer's segment ``meta`` on an object root. When another
        holder's ``.meta`` took its seq, the seq is recorded void in the MANIFEST (a
        later holder's epoch there raises LeaseLostError: this writer was fenced) and
        the same bytes are uploaded again at the next free seq; ``commit`` makes STATE
        name the moved segment (its new commit point) before it is published. Returns
        the metadata published. ``txn_floor``: recorded in the MANIFEST with it (§12.6)."""
        for _ in range(_MOVES):
            try:
                self.segments.publish(meta, txns=txns, txn_floor=txn_floor)
                return meta
            except SeqTakenError:
                pass
            self.segments.void(self.pid, meta.seq)
            seq = max(self._next_seq, meta.seq + 1)
            for _ in range(_MOVES):
                try:
                    moved = self.segments.move_data(meta, seq)
                    break
                except SeqTakenError:
                    self.segments.void(self.pid, seq)
                    seq += 1
            else:
                raise OSError(f"partition {self.pid}: {_MOVES} seqs in a row taken after {seq}")
            self._next_seq = moved.seq + 1
            commit(moved)
            meta = moved
        raise OSError(f"partition {self.pid}: segment {meta.seq} taken {_MOVES} times in a row")

    def _sealed_txns(self) -> set[int]:
        """Object root: the transaction ids the partition's MANIFEST records (one GET)."""
        manifests = self.segments.manifests
        if manifests is None or not self.segments.manifest_publishes:
            return set()
        try:
            m = manifests.read(self.pid)
        except CorruptionError:
            return set()
        return m.sealed_txns() if m is not None else set()

    # -- recovery ------------------------------------------------------------------
    def _read_state(self) -> dict:
        try:
            raw = self.io.read_file(self.state_path)
        except FileNotFoundError:
            return {"next_seq": 1, "covered": [], "publishing": None}
        body = fmt.decode_frame(self.state_path, fmt.MAGIC_STATE, raw)
        for key in ("next_seq", "covered"):
            if key not in body:
                raise CorruptionError(self.state_path, fmt.FRAME_SIZE, f"STATE lacks {key!r}")
        return body

    def _write_state(self, publishing: SegmentMeta | None) -> None:
        # a cut is kept while its file exists (this write precedes any unlink)
        present = {f.first_seq for f in self.wal.files()}
        self._wal_limit = {k: v for k, v in self._wal_limit.items() if k in present}
        body = {
            "partition": self.pid,
            "next_seq": self._next_seq,
            "covered": self._covered.to_list(),
            "publishing": publishing.to_body() if publishing is not None else None,
            "next_record_seq": self.wal.next_seq,
            "updated_ns": time.time_ns(),
        }
        if publishing is not None and self._unpublished_txns:  # object roots only (§12.6)
            body["publishing_txns"] = list(self._unpublished_txns)
        if self._wal_limit:
            body["wal_limit"] = sorted([k, v] for k, v in self._wal_limit.items())
        self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, body))

    def _state_durable(self, state: dict) -> None:
        """Write the STATE just read again, atomically, before acting on it.

        The STATE read may be one whose rename is not durable yet (the directory fsync
        after it failed in this process, or the process that wrote it died before the
        fsync): a segment published on its word, with the old STATE back after a power
        loss, would be read beside the WAL records the old STATE replays.
        """
        self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, state))

    def _recover(self, *, republish: bool = False) -> RecoveryReport:
        """Rebuild the in-memory state from disk (§7.3); ``republish``: write the
        ``.meta`` of STATE's ``publishing`` segment again even if it exists (its name
        may not be durable after a publication that failed in this process)."""
        t0 = time.monotonic()
        rep = RecoveryReport(partition=self.pid)
        self._open = OpenSegment()
        self._pending = {}
        self._unpublished = None
        self._unpublished_txns = ()
        self._admitting = set()
        state = self._read_state()
        self._covered = RangeSet(tuple(r) for r in state["covered"])
        self._next_seq = int(state["next_seq"])
        # The ack log's DELETED facts (retention records them before unlinking) are
        # the one durable trace of segments that are gone: consulted when STATE cannot
        # tell (a new or lost ``wal.path``) or names a segment whose .meta is missing.
        deleted = NO_DELETIONS
        publishing = state.get("publishing")
        state_missing = "partition" not in state
        if self._deleted is not None and publishing:
            deleted = self._deleted.deleted_marks(self.pid)
        elif self._deleted is not None and state_missing:
            try:
                deleted = self._deleted.deleted_marks(self.pid)
            except CorruptionError as e:
                if not self.segments.manifest_publishes:
                    raise
                # an object root's MANIFEST still keeps every seq published below its
                # high: a damaged ack log stops no new machine (its floor is the
                # MANIFEST's alone then, §11)
                log.warning("quiver.recovery.deleted_marks_unread partition=%s: %s", self.pid, e)
        fenced_manifest = None
        if self.segments.manifest_publishes:
            self._check_lease()  # a fenced writer learns it here, before touching anything
            # fence first (§12.4): the MANIFEST is brought to this writer's epoch before
            # anything else is written or removed, so every earlier holder's manifest
            # change fails from here on, and a higher epoch there fences this writer
            fenced_manifest = self.segments.sync_manifest(self.pid)
        if publishing and self.segments.manifest_publishes:
            # an object root: the MANIFEST is the publication point, and this STATE is
            # the one word that the segment is this writer's (its .meta may be there
            # already: a crash before the manifest step); never any other .meta
            meta = SegmentMeta.from_body(self.state_path, publishing)
            txns = tuple(int(t) for t in state.get("publishing_txns", ()))
            taken = set(txns) & self._sealed_txns() if txns else set()
            if deleted.holds(meta.seq):
                log.info(
                    "quiver.recovery.published_then_deleted partition=%s seq=%d",
                    self.pid,
                    meta.seq,
                )
            elif taken:
                # a sealer published some of its transactions from their staged objects
                # while this writer was away (§12.6): the segment is never published;
                # its WAL records are read again, and those transactions skipped
                log.warning(
                    "quiver.recovery.sealed_elsewhere partition=%s seq=%d txns=%s",
                    self.pid,
                    meta.seq,
                    sorted(taken),
                )
                self._covered = _minus(self._covered, meta.wal_ranges)
            else:
                self._state_durable(state)

                def commit(moved: SegmentMeta) -> None:
                    state["next_seq"] = moved.seq + 1
                    state["publishing"] = moved.to_body()
                    self._state_durable(state)

                try:
                    rep.republished_seq = self._publish_own(meta, commit, txns).seq
                    self._drop_staged(txns)
                except SegmentMissingError as e:
                    if e.kind != "missing":
                        raise
                    listed = self.segments.manifest_copy(self.pid)
                    if (
                        self._deleted is not None
                        and listed is not None
                        and not listed.lists(meta.seq)
                    ):
                        # never published (the MANIFEST does not list it, the ack log
                        # records no deletion of it): a successor passed its seq over
                        # and gc removed its objects. Its rows are in this WAL only:
                        # read again and sealed anew, never taken for delivered
                        log.warning(
                            "quiver.recovery.unpublished_removed partition=%s seq=%d: its "
                            "rows are sealed again from the WAL",
                            self.pid,
                            meta.seq,
                        )
                        self._covered = _minus(self._covered, meta.wal_ranges)
                    else:
                        log.info(
                            "quiver.recovery.published_then_deleted partition=%s seq=%d",
                            self.pid,
                            meta.seq,
                        )
        elif publishing:
            meta = SegmentMeta.from_body(self.state_path, publishing)
            if republish and not deleted.holds(meta.seq):
                self._state_durable(state)
                try:
                    self.segments.publish(meta, again=True)
                    rep.republished_seq = meta.seq
                except SegmentMissingError as e:
                    if e.kind != "missing":
                        raise
            elif not self.segments.is_published(self.pid, meta.seq):
                # Either we crashed between the STATE commit point and publication (the
                # .arrow is there: finish publishing), or the segment was published and
                # retention deleted it since (the ack log says so, or the .arrow is gone;
                # retention may die between the two unlinks, leaving the .arrow).
                if deleted.holds(meta.seq):
                    log.info(
                        "quiver.recovery.published_then_deleted partition=%s seq=%d",
                        self.pid,
                        meta.seq,
                    )
                else:
                    self._state_durable(state)
                    try:
                        self.segments.publish(meta)
                        rep.republished_seq = meta.seq
                    except SegmentMissingError as e:
                        if e.kind != "missing":
                            raise
                        log.info(
                            "quiver.recovery.published_then_deleted partition=%s seq=%d",
                            self.pid,
                            meta.seq,
                        )
        on_objects = self.segments.manifest_publishes
        # an object root's writer removes nothing it did not publish (§12.4): another
        # holder's upload may be in flight, and a delete cannot be fenced
        cleanup = self.segments.cleanup(self.pid, unpublished=not on_objects)
        rep.removed_files.extend(cleanup.removed)
        if on_objects:
            # the MANIFEST this writer fenced, as its own publications since left it
            manifest = self.segments.manifest_copy(self.pid) or fenced_manifest
        else:
            # The partition's MANIFEST (§6.7): written from a listing if it has none
            # (the one-time upgrade) or is damaged; a segment published after its last
            # entry (a publication that died before its manifest step) is added.
            manifest = self.segments.sync_manifest(self.pid)
        # POSIX: seqs are allocated without gaps: an unpublished orphan's seq was never
        # seen by any reader and is reused; every seq that was published (listed,
        # quarantined, recorded deleted in the ack log, or below the manifest's high)
        # stays below the floor for good. Object root: no seq under which any object
        # was seen is used again (its first publication records the seqs it passed over
        # void, and gc removes their objects).
        high = manifest.high if manifest is not None else 0
        seen = cleanup.max_seq_seen if on_objects else cleanup.max_published_seq
        floor = max(seen, deleted.highest, high) + 1
        self._next_seq = max(self._next_seq, floor)
        rep.next_segment_seq = self._next_seq
        # object root (§12.6): transactions another holder sealed are never sealed
        # again, and this writer's transaction ids start above every id the MANIFEST
        # or a staged object names (no id of another incarnation is ever reused)
        sealed: set[int] = set()
        txn_floor = 0
        txn_floor_recorded = 0
        if self.segments.manifest_publishes and manifest is not None:
            assert self.segments.manifests is not None
            sealed = manifest.sealed_txns()
            staged = staged_ids(self.segments.manifests.objects, self.pid)
            txn_floor = max([*sealed, *staged, manifest.txn_floor], default=0)
            txn_floor_recorded = manifest.txn_floor
            self._drop_staged(tuple(t for t in staged if manifest.seals(t)))

        self._wal_limit = wal_limits(self.state_path, state)
        wal = recover_wal(
            self.wal_dir,
            salvage=self.config.salvage,
            io=self.io,
            covered=self._covered.covers,
            limits=self._wal_limit,
        )
        rep.wal_files = len(wal.files)
        rep.torn_tails = list(wal.torn)
        # The WAL writer exists before anything is replayed: replaying may finalize
        # (a schema change, a transaction past segment.target_size). Record seqs continue
        # from the durable floor, never from 1, or new records would look covered.
        covered_top = max((hi for _, hi in self._covered), default=0)
        next_record_seq = max(
            wal.next_record_seq,
            int(state.get("next_record_seq", 1)),
            covered_top + 1,
            txn_floor + 1,
        )
        skipped = next_record_seq > wal.next_record_seq and bool(wal.files)
        if skipped:
            # seqs written once but never durable (or cut as a torn tail) are gone: say
            # so in STATE, or the next recovery takes the gap before the new file for
            # damage (the range holds no record anyone acknowledged)
            self._covered.add(wal.next_record_seq, next_record_seq - 1)
        self.wal = WalWriter(
            self.wal_dir, self.config.wal, next_record_seq=next_record_seq, io=self.io
        )
        old = time.monotonic() - self.config.segment.max_open_duration_s
        self._recovering = True  # no WAL file is deleted before the whole WAL is replayed
        try:
            self._replay(wal, rep, old)
            # named by the MANIFEST, or at or below its txn_floor (sealed or decided
            # against: a retired transaction txns_gone no longer names is never sealed
            # again, §12.6)
            floored = {t for t in self._pending if t <= txn_floor_recorded}
            for txn_id in sorted(sealed.intersection(self._pending) | floored):
                txn = self._pending.pop(txn_id)  # sealed by another holder: covered
                for seq in (txn_id, *(r[0] for r in txn.records)):
                    self._covered.add(seq, seq)
                rep.sealed_elsewhere += 1
                log.warning(
                    "quiver.recovery.sealed_elsewhere partition=%s txn=%d app=%s version=%d",
                    self.pid,
                    txn_id,
                    txn.app,
                    txn.version,
                )
            before = len(self._pending)
            self._resolve()
            rep.discarded_txns = before - len(self._pending) if before else 0
        finally:
            self._recovering = False
        if self._open:  # recovered data is old: let maintenance finalize it promptly
            self._open.opened_mono = min(self._open.opened_mono, old)
        rep.pending_txns = len(self._pending)
        if self.segments.manifest_publishes and manifest is not None:
            # staged transactions neither this WAL nor the MANIFEST holds (a lost disk,
            # §12.6): this writer holds the lease, so no observer seals them; it seals
            # the committed ones itself (``_seal_foreign``), next look at once
            self._staged.adopt(
                [t for t in staged if not manifest.seals(t)],
                {*self._pending, *self._open.txns, *self._unpublished_txns},
            )
        if self.segments.manifest_publishes:
            # the listing above may lag behind the bucket: the floor this writer records
            # stays at the MANIFEST's until a later listing is taken into account
            self._staged.ceiling = manifest.txn_floor if manifest is not None else 0
        if (
            publishing
            or rep.torn_tails
            or state.get("next_seq") != self._next_seq
            or state_missing
            or skipped
        ):
            self._write_state(None)
        self._truncate_wal()
        rep.next_segment_seq = self._next_seq
        rep.duration_s = time.monotonic() - t0
        if rep.records_scanned or rep.torn_tails or rep.removed_files:
            log.info("quiver.recovery %s", rep.summary())
        return rep

    def _replay(self, wal: WalRecovery, rep: RecoveryReport, old: float) -> None:
        """Replay the scanned WAL records not yet inside durable segments (§7.3 step 5)."""
        decoder = WalDecoder()
        # Transaction markers already covered by a segment: a data record naming one
        # (left by an older writer that covered a marker before its data) is resolved
        # by the marker's decision instead of wedging the partition.
        covered_markers: dict[int, dict] = {}
        for scan in wal.scans:
            rep.salvaged_skips += len(scan.skipped)
            for rec in scan.records:
                rep.records_scanned += 1
                batch = decoder.decode(rec)  # keeps the per-file schema current
                if rec.rtype == fmt.REC_TXN and rec.seq in self._covered:
                    covered_markers[rec.seq] = decode_txn(rec)
                    continue
                if rec.seq in self._covered:
                    continue
                if rec.rtype == fmt.REC_TXN:
                    info = decode_txn(rec)
                    self._pending[rec.seq] = Txn(
                        rec.seq,
                        str(info["app"]),
                        int(str(info["version"])),
                        str(info["tag"]),
                        # recovered data is old: sealed promptly once its commit is known
                        first_mono=old,
                    )
                    continue
                if batch is None:
                    continue
                rep.records_replayed += 1
                rep.rows_replayed += batch.num_rows
                if rec.txn_id == 0:
                    self._admit([(rec.seq, rec.ingestion_ns, batch)], since=old)
                    continue
                txn = self._pending.get(rec.txn_id)
                if txn is None and rec.txn_id in covered_markers:
                    info = covered_markers[rec.txn_id]
                    txn = self._pending[rec.txn_id] = Txn(
                        rec.txn_id,
                        str(info["app"]),
                        int(str(info["version"])),
                        str(info["tag"]),
                        first_mono=old,
                    )
                if txn is None and rec.txn_id in self._covered:
                    # the marker's file was deleted as unneeded: its transaction was
                    # decided and these records discarded (a winner's are covered first)
                    continue
                if txn is None:
                    raise CorruptionError(
                        scan.path,
                        rec.offset,
                        f"record {rec.seq} names unknown txn {rec.txn_id}",
                    )
                txn.records.append((rec.seq, rec.ingestion_ns, batch))

    # -- a failed I/O in a process that goes on (§7.4) ------------------------------------
    def _poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk.

        Used wherever a failure may leave memory other than what recovery would
        rebuild (a STATE or ``.meta`` write whose outcome on disk is unknown, an
        admission cut short, a failed WAL instance, a WAL deletion cut short).
        """
        if self._broken is None:
            self._broken = e
            log.error(
                "quiver.writer.discarded partition=%s error=%s: the next call recovers "
                "the partition from disk",
                self.pid,
                e,
            )
        if isinstance(e, WalFailedError) or self.wal.failed:
            self._unreported_wal = self._unreported_wal or e
            self._seal_on_recovery = True

    def _reported(self, e: BaseException) -> None:
        """``e`` reaches a caller of append/flush/finalize/begin_txn: a WAL failure
        among its causes has been reported."""
        if isinstance(e, WalFailedError):
            self._unreported_wal = None

    def _ready(self, *, foreground: bool = True) -> None:
        """Make the writer usable for the next operation (caller holds the lock).

        Raises a WAL failure nobody was told of to a foreground caller (once); then
        rebuilds a discarded state through recovery. A background caller (a tick)
        rebuilds too, so what calls that returned wrote is sealed without waiting for a
        caller, but leaves the report of the failure for the next foreground call.
        """
        self._check_open()
        if self._broken is None and self.wal.failed:
            self._poison(self.wal.failure or WalFailedError(0, "wal writer failed"))
        if self._unreported_wal is not None and foreground:
            e, self._unreported_wal = self._unreported_wal, None
            raise e
        if self._broken is not None:
            unreported = self._unreported_wal
            try:
                self._rebuild()
            except WalFailedError:
                if foreground:
                    self._unreported_wal = None
                raise
            if not foreground:  # a tick recovers; the report still waits for a caller
                self._unreported_wal = self._unreported_wal or unreported

    def _rebuild(self) -> None:
        """Recover the partition from disk in place, keeping the partition lock.

        The old WAL writer is closed first (its written records are flushed unless it
        failed: a failed file is never synced again). After a WAL failure the failed
        file is cut for good and the records it may not hold durably are written again
        into a new file (:meth:`_settle_failed_wal`); recovery then reads the WAL, and
        the records it replays into the open segment are sealed at once.
        """
        cause = self._broken
        try:
            self.wal.close()  # idempotent; raises once if its last flush fails
        except WalFailedError as e:
            self._unreported_wal = e
            self._seal_on_recovery = True
            raise
        try:
            self._settle_failed_wal()
            self.recovery = self._recover(republish=True)
            if self._seal_on_recovery and self._open:
                self._finalize()
        except BaseException as e:
            self._broken = e
            try:
                self.wal.close()
            except Exception as close_error:  # never opened a file: nothing to lose
                log.warning("quiver.writer.close_failed partition=%s: %s", self.pid, close_error)
            raise
        self._broken = None
        self._unreported_wal = None
        self._seal_on_recovery = False
        self._cut, self._cut_settled = None, False
        log.warning(
            "quiver.writer.recovered partition=%s after=%s %s",
            self.pid,
            cause,
            self.recovery.summary(),
        )

    def _settle_failed_wal(self) -> None:
        """After a failed WAL write or fsync: cut the failed file, keep the rest (§7.4).

        The cut is the last seq both fsynced and acknowledged: the failed writer's
        ``durable_seq``, lowered to just before the first record of a call that raised
        (all of an append is one unit, a table included). No record after the cut was
        ever acknowledged and none may ever be read: the files that start after it are
        deleted, then STATE's ``wal_limit`` ends the file that holds the cut there,
        before anything else is written. Records after the cut that a call which
        returned wrote (not fsynced: the failed file may not hold them durably) are
        written again from memory, with the same seqs, into a new file that starts
        right after the cut, and fsynced there; recovery reads them back. A failure
        midway keeps the cut and the records for the next attempt; so does a recovery
        that fails after the cut is settled (``self.wal`` may still be the failed
        writer then, whose ``durable_seq`` alone knows nothing of the call that raised),
        until :meth:`_rebuild` succeeds.
        """
        if self._cut_settled:
            return
        if self._cut is None:
            wal = self.wal
            if not wal.failed:
                return
            stop = self._drop_from
            cut = wal.durable_seq if stop is None else min(wal.durable_seq, stop - 1)
            carry = [r for r in wal.unsynced() if r.seq > cut and (stop is None or r.seq < stop)]
            self._cut = (cut, carry)
            self._drop_from = None
        cut, carry = self._cut
        files = list_wal_files(self.wal_dir, self.io)
        doomed = [f.path for f in files if f.first_seq > cut]
        if doomed:
            self.io.durable_unlink(doomed)
        kept = [f.first_seq for f in files if f.first_seq <= cut]
        if kept:
            state = self._read_state()  # from disk: the state in memory was discarded
            limits = {k: v for k, v in wal_limits(self.state_path, state).items() if k in kept}
            limits[kept[-1]] = min(limits.get(kept[-1], cut), cut)
            state["wal_limit"] = sorted([k, v] for k, v in limits.items())
            self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, state))
        if carry:
            w = WalWriter(
                self.wal_dir,
                replace(self.config.wal, flush_interval_s=0),
                next_record_seq=cut + 1,
                io=self.io,
            )
            try:
                w.rewrite(carry)
                w.flush()
            finally:
                w.close()
            log.warning(
                "quiver.wal.rewritten partition=%s records=%d seqs=%d..%d",
                self.pid,
                len(carry),
                carry[0].seq,
                carry[-1].seq,
            )
        self._cut_settled = True
