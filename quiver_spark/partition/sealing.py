"""Admitting rows into a partition writer's open segment and sealing it into a
published segment (ARCHITECTURE.md §7.2, §9, §12.4, §12.6).

:class:`SealingWriter` is the part of a partition writer every other part goes
through: it holds the writer's state, admits committed transactions into the open
segment (:meth:`~SealingWriter._resolve`, :meth:`~SealingWriter._admit`), finalizes it
(the ``.arrow``, STATE's commit point, the publication, the WAL truncated), writes
STATE, and discards the state after a failure (§7.4). Where the two kinds of root
differ it asks the location's publication
(:class:`~quiver_spark.segment.publication.Publication`: whether a publication names
its transactions) and holds the lease the root kind gave it (none on a POSIX root);
it never asks which kind of root it is on. Recovery builds on it
(:class:`~.rebuild.RecoveringWriter`), the live writer on both
(:class:`~.writer.PartitionWriter`); nothing here calls up into them.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time

import pyarrow as pa

from .. import format as fmt
from .. import layout
from ..commits import CommitLog
from ..config import StoreConfig, validate_name
from ..control.lease import Lease
from ..errors import LeaseLostError, QuiverError, SeqTakenError
from ..fs import DEFAULT_IO, FileIO
from ..ranges import RangeSet, ranges_of
from ..seams import DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..wal import WalWriter
from .failure import FailureState
from .model import RESOLVE_CAP_S, RESOLVE_GRACE_S, OpenSegment, Txn, partition_dir
from .publication import MOVES, check_lease, publish_own
from .staged import StagedBook, staged_schema
from .staged_seal import seal_one

log = logging.getLogger(__name__)


class SealingWriter:
    """A partition writer's state, its admission of rows and its finalize."""

    # rebuilt from disk by every recovery (:meth:`~.rebuild.RecoveringWriter._recover`)
    wal: WalWriter
    _covered: RangeSet
    _next_seq: int

    def __init__(
        self,
        *,
        pid: str,
        wal_root: str,
        config: StoreConfig,
        segments: SegmentLocation,
        commits: CommitLog,
        io: FileIO = DEFAULT_IO,
        deleted: DeletedSegments | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.pid = validate_name("partition", pid)
        self.lease = lease
        """On an object root, the partition's writer lease (§12.3), released at close."""
        self._deleted = deleted
        self.config = config
        self.segments = segments
        self.publication = segments.publication
        """What makes a segment published here: asked wherever the two kinds of root
        differ (its transactions named, the fence, what recovery reads, §12.4)."""
        self.commits = commits
        self.io = io
        self.dir = partition_dir(wal_root, pid)
        self.wal_dir = os.path.join(self.dir, layout.wal_dir_name())
        self.state_path = os.path.join(self.dir, layout.state_file_name())
        self._lock = threading.RLock()
        self._open = OpenSegment()
        self._pending: dict[int, Txn] = {}
        self._recheck: dict[int, tuple[float, float]] = {}  # txn -> (next look, interval)
        self._closed = False
        self.last_write_ns: int | None = None
        self.finalized_total = 0
        self.last_finalized: SegmentMeta | None = None
        self.last_published: SegmentMeta | None = None
        self._unpublished: SegmentMeta | None = None
        self._unpublished_txns: tuple[int, ...] = ()
        # WAL seqs being admitted into the open segment right now: a finalize that
        # an admission triggers must not delete the WAL file holding them
        self._admitting: set[int] = set()
        self._recovering = False
        self.maintenance_error: BaseException | None = None
        # a failure that may have left the in-memory state other than what recovery
        # would rebuild from disk, and what it leaves to do (§7.4)
        self._failure = FailureState(self.pid)
        # STATE's wal_limit: WAL files cut after a failure (first seq -> last seq read)
        self._wal_limit: dict[int, int] = {}
        # object root: the staged transactions of this partition it keeps track of
        # (failed deletes, another incarnation's, the floor's ceiling; §12.6)
        self._staged = StagedBook(segments, self.pid)

    # -- a failed I/O in a process that goes on (§7.4) ------------------------------------
    def _poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`FailureState.poison`)."""
        self._failure.poison(e, self.wal)

    # -- admission ---------------------------------------------------------------------
    def _resolve(self, *, backoff: bool = False) -> None:
        """Move committed transactions into the open segment; drop losers.

        ``backoff`` (the maintenance tick's calls, where each look is a request:
        :attr:`CommitLog.lookups_back_off`): a transaction undecided
        :data:`RESOLVE_GRACE_S` after its first record is looked at again after 1 s,
        then 2, 4... at most every :data:`RESOLVE_CAP_S` (a batch never rerun stays
        pending for good)."""
        now = time.monotonic()
        patient = backoff and self.commits.lookups_back_off
        for gone in set(self._recheck) - set(self._pending):
            del self._recheck[gone]
        for txn_id in sorted(self._pending):
            txn = self._pending[txn_id]
            if patient and now < self._recheck.get(txn_id, (now, 0.0))[0]:
                continue
            rec = self.commits.get(txn.app, txn.version)
            if rec is None:
                if patient and now - (txn.first_mono or now) >= RESOLVE_GRACE_S:
                    interval = min(
                        RESOLVE_CAP_S, max(1.0, 2 * self._recheck.get(txn_id, (0, 0.5))[1])
                    )
                    self._recheck[txn_id] = (now + interval, interval)
                continue
            del self._pending[txn_id]
            self._recheck.pop(txn_id, None)
            if (self.pid, txn_id) in rec.winners:
                # the REC_TXN marker is covered with (never before) its data
                self._admit(txn.records, since=txn.first_mono, marker=txn_id)
            else:
                # a loser's records are never needed again: covered, so a recovery that
                # finds them after the marker's file was deleted does not mistake them
                # for damage (persisted with the next STATE write, before any unlink)
                for seq in (txn_id, *(r[0] for r in txn.records)):
                    self._covered.add(seq, seq)
                log.info(
                    "quiver.txn.discard partition=%s txn=%d app=%s version=%d",
                    self.pid,
                    txn_id,
                    txn.app,
                    txn.version,
                )

    def _admit(
        self,
        records: list[tuple[int, int, pa.RecordBatch]],
        since: float | None = None,
        marker: int | None = None,
    ) -> None:
        """Add records to the open segment; ``since``: when they were appended (monotonic).

        ``marker`` is the seq of the transaction's ``REC_TXN`` record: it joins the open
        segment after the last of its records, so a segment never covers a marker
        before all its data (recovery resolves uncovered records through the marker).
        Records not yet admitted stay in ``_admitting`` so a finalize triggered midway
        (schema change, ``segment.target_size``) keeps their WAL files. A finalize that
        fails midway leaves the rest of the records nowhere in memory: the state is
        discarded and the next call replays them from the WAL (§7.4).
        """
        self._admitting = {seq for seq, _, _ in records}
        if marker is not None:
            self._admitting.add(marker)
        target = self.config.segment.target_size_bytes
        # where a publication names its transactions, a transaction's rows stay in one
        # segment (but for a schema change within it), so an entry naming it holds all
        # of it (§12.6)
        whole = marker is not None and self.publication.names_txns
        if whole and marker is not None:
            records = staged_schema(self.pid, marker, records)
        try:
            if (
                whole
                and self._open
                and (self._open.nbytes + sum(b.nbytes for _, _, b in records) >= target)
            ):
                self._finalize()
            for seq, ns, batch in records:
                schema = self._open.schema
                if schema is not None and not batch.schema.equals(schema):
                    self._finalize()
                if marker is not None and marker not in self._open.txns:
                    self._open.txns.append(marker)
                self._open.add(seq, ns, batch, since)
                self._admitting.discard(seq)
                if not whole and self._open.nbytes >= target:
                    self._finalize()
            if marker is not None:
                self._open.seqs.append(marker)
            if whole and self._open.nbytes >= target:
                self._finalize()
        except BaseException as e:
            self._poison(e)
            raise
        finally:
            self._admitting = set()

    # -- finalize and publication ------------------------------------------------------
    def _check_lease(self) -> None:
        """Before a publication: the writer still holds its lease, if it has one
        (:func:`~.publication.check_lease`: a lost one raises LeaseLostError, one
        short of time is renewed first)."""
        check_lease(self.lease)

    def _drop_staged(self, txns: tuple[int, ...]) -> None:
        """Object root: remove the staged objects of transactions now in the MANIFEST
        (best effort, :meth:`StagedBook.drop`)."""
        self._staged.drop(txns)

    def _publish_pending(self) -> None:
        """Publish the segment past the commit point; idempotent, retried until it lands.

        If publication fails (say an object store answered with an error after the
        copy took effect, or the directory fsync after the rename failed), the rows
        already belong to that segment, but whether its ``.meta`` is durable is
        unknown: the state is discarded and the next call's recovery writes the same
        ``.meta`` again, through a new file, before STATE stops naming it.
        """
        if self._unpublished is not None:
            try:
                self._check_lease()
                floor = self._txn_floor()
                self._unpublished = publish_own(
                    self.segments,
                    self.pid,
                    self._unpublished,
                    next_seq=self._next_seq,
                    commit=self._moved,
                    txns=self._unpublished_txns,
                    txn_floor=floor,
                )
            except BaseException as e:
                self._poison(e)
                raise
            self.last_published = self._unpublished
            self._unpublished = None
            self._drop_staged(self._unpublished_txns)
            self._unpublished_txns = ()

    def _txn_floor(self) -> int:
        """The ``txn_floor`` to record where publications name transactions (§12.6;
        recorded nowhere else): below the lowest transaction this writer has not
        sealed yet (pending, committed in the open segment, being admitted, or another
        incarnation's it looks at), else its highest id; capped as
        :meth:`StagedBook.floor` says."""
        # ``_admitting``: a transaction being admitted (its marker among its seqs) is in
        # neither ``_pending`` nor the open segment while a finalize it triggers runs
        writing = [*self._pending, *self._open.txns, *self._admitting]
        return self._staged.floor(writing, self._unpublished_txns, self.wal.next_seq - 1)

    def _seal_foreign(self) -> None:
        """Object root: seal the committed staged transactions this writer's WAL does
        not hold (another incarnation's, whose disk was lost) as a sealer would
        (§12.6), at this writer's epoch, and drop those decided without them; when to
        look at each again is the :class:`StagedBook`'s. Runs only with nothing past
        the commit point (``_unpublished`` is None)."""
        staged = self._staged
        if not staged.foreign or self._unpublished is not None or self.lease is None:
            return
        assert self.segments.manifests is not None
        objects = self.segments.manifests.objects
        now = time.monotonic()
        garbage: list[int] = []
        for txn_id in staged.due(now):
            done = seal_one(
                objects,
                self.commits,
                self.segments,
                self.config.segment,
                self.pid,
                txn_id,
                lease=self.lease,
                check_lease=self._check_lease,
                log=log,
                first_seq=self._next_seq,
            )
            if done.meta is not None:
                self._next_seq = max(self._next_seq, done.meta.seq + 1)
            if staged.looked(txn_id, done, now):
                garbage.append(txn_id)
        staged.drop_garbage(garbage)

    def _moved(self, meta: SegmentMeta) -> None:
        """Object root: this writer's segment now goes out as ``meta`` (its seq was
        taken by another holder): STATE names it, its new commit point."""
        self._next_seq = meta.seq + 1
        self._unpublished = meta
        self._write_state(meta)

    def _finalize(self) -> SegmentMeta | None:
        self._publish_pending()
        # never while recovering: the WAL not replayed yet may hold a foreign-looking
        # transaction itself (sealed from both, its rows would be read twice)
        if self._staged.foreign and not self._recovering:
            try:
                self._seal_foreign()
            except LeaseLostError as e:
                self._poison(e)
                raise
            except (QuiverError, OSError) as e:  # kept and retried; never raised into a write
                self.maintenance_error = e
                log.error("quiver.staged.seal_failed partition=%s: %s", self.pid, e)
        seg = self._open
        batches = seg.batches
        if not batches:
            if seg.seqs:  # only transaction markers: nothing to publish, but covered
                for lo, hi in ranges_of(seg.seqs):
                    self._covered.add(lo, hi)
                self._open = OpenSegment()
            return None
        seq = self._next_seq
        txns = tuple(seg.txns) if self.publication.names_txns else ()
        try:
            self._check_lease()
        except LeaseLostError as e:
            self._poison(e)
            raise
        # A failure here changes nothing recovery would not redo: the rows stay open
        # and the retry writes the same seq again (any orphan .arrow is replaced).
        for _ in range(MOVES):
            try:
                meta = self.segments.write_data(
                    self.pid,
                    seq,
                    batches,
                    min_ingestion_ns=seg.min_ns,
                    max_ingestion_ns=seg.max_ns,
                    wal_ranges=ranges_of(seg.seqs),
                    event_time_column=self.config.segment.event_time_column,
                    target_batch_rows=self.config.segment.target_batch_rows,
                )
                break
            except SeqTakenError:
                # object root: another lease holder's objects are under this seq; it
                # is recorded void (fenced: LeaseLostError) and the next one is used
                try:
                    self.segments.void(self.pid, seq)
                except BaseException as e:
                    self._poison(e)
                    raise
                seq += 1
                self._next_seq = seq
        else:
            raise OSError(f"partition {self.pid}: {MOVES} seqs in a row taken up to {seq}")
        try:
            for lo, hi in meta.wal_ranges:
                self._covered.add(lo, hi)
            self._next_seq = seq + 1
            self._unpublished_txns = txns  # STATE names them with the segment
            # commit point: these rows now belong to ``meta``. A failed write may
            # have replaced STATE all the same (its directory fsync failed after the
            # rename): only recovery knows, so the state is discarded (§7.4).
            self._write_state(meta)
            self._open = OpenSegment()
            self._unpublished = meta
            self._publish_pending()
            meta = self.last_published or meta  # moved to another seq on an object root
            self.finalized_total += 1
            self.last_finalized = meta
            log.info(
                "quiver.segment.finalize partition=%s seq=%d rows=%d bytes=%d",
                self.pid,
                seq,
                meta.rows,
                meta.size_bytes,
            )
            self.wal.rotate()
            if not self._recovering:  # recovery truncates once the whole WAL is replayed
                self._truncate_wal()
        except BaseException as e:
            self._poison(e)
            raise
        return meta

    def _truncate_wal(self) -> None:
        """Delete WAL files whose every record is in a durable segment or discarded."""
        undone = sorted(
            [*self._open.seqs, *self._admitting]
            + [s for t in self._pending.values() for s in (t.txn_id, *(r[0] for r in t.records))]
        )
        files = self.wal.files()
        current = self.wal.current_path
        doomed = []
        for i, info in enumerate(files):
            if info.path == current:
                continue
            last = files[i + 1].first_seq - 1 if i + 1 < len(files) else self.wal.next_seq - 1
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
                self._covered.add(info.first_seq, (nxt or self.wal.next_seq) - 1)
            self._write_state(self._unpublished)
            self.wal.delete_files(doomed)
            log.debug("quiver.wal.truncate partition=%s files=%d", self.pid, len(doomed))
        remaining = self.wal.files()
        if remaining:
            self._covered.drop_below(remaining[0].first_seq)

    # -- STATE ---------------------------------------------------------------------
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
