"""The live writer of one store partition: appends, transactions, finalize, maintenance.

A :class:`PartitionWriter` owns a partition exclusively (``flock`` on its LOCK file)
for its lifetime. Appends go to the WAL and to the in-memory open segment; records
of a transaction wait in ``pending`` until its commit record decides them (§9).
Finalize writes the open segment as an immutable Arrow IPC file, commits the
partition STATE (the commit point), then publishes the segment's metadata and
truncates WAL files nobody needs (§7). Opening, and the next call after a failure
(§7.4), rebuild the state from disk: :mod:`.recovery` reads and returns plans, the
writer applies them (:meth:`PartitionWriter._recover`).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Iterator

import pyarrow as pa

from .. import format as fmt
from ..commits import CommitLog
from ..config import StoreConfig, validate_name
from ..control.lease import PURPOSE_SEALER, Lease
from ..errors import (
    BatchTooLargeError,
    CorruptionError,
    LeaseLostError,
    QuiverError,
    SegmentMissingError,
    SeqTakenError,
    StoreAtCapacityError,
    StoreClosedError,
    WalFailedError,
)
from ..fs import DEFAULT_IO, FileIO, PartitionLock
from ..ranges import RangeSet, ranges_of
from ..seams import DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..wal import WalWriter, encode_txn, recover_wal, wal_limits
from .failure import FailureState
from .model import (
    HEARTBEAT_PENDING,
    RESOLVE_CAP_S,
    RESOLVE_GRACE_S,
    OpenSegment,
    RecoveryReport,
    Txn,
    partition_dir,
)
from .publication import MOVES, check_lease, publish_own
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
)
from .staged import StagedBook, staged_schema
from .staged_seal import seal_one

log = logging.getLogger(__name__)


class PartitionWriter:
    """Exclusive writer of one partition. Thread-safe; use through QuiverStore."""

    # rebuilt from disk by every recovery (:meth:`_recover`)
    wal: WalWriter
    recovery: RecoveryReport
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
        self.commits = commits
        self.io = io
        self.dir = partition_dir(wal_root, pid)
        self.wal_dir = os.path.join(self.dir, fmt.WAL_DIR)
        self.state_path = os.path.join(self.dir, fmt.STATE_FILE)
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
        io.mkdir(self.wal_dir)
        self._flock = PartitionLock.acquire(os.path.join(self.dir, fmt.LOCK_FILE))
        try:
            self.recovery = self._recover()
        except BaseException:
            if hasattr(self, "wal"):  # stop its flusher thread; it never opened a file
                try:
                    self.wal.close()
                except Exception as e:
                    log.warning("quiver.writer.close_failed partition=%s: %s", self.pid, e)
            self._flock.release()
            raise

    # -- appends -------------------------------------------------------------------
    def begin_txn(self, app: str, version: int, tag: str = "") -> int:
        """Start a transaction; returns its id (the seq of its REC_TXN record)."""
        validate_name("transaction app id", app)
        with self._lock:
            self._ready()
            payload = encode_txn(app, int(version), tag)
            first = self.wal.next_seq
            try:
                seq = self.wal.append(fmt.REC_TXN, payload, ingestion_ns=time.time_ns())
            except WalFailedError as e:
                self._failure.failed_call(first)
                self._poison(e)
                self._failure.reported(e)
                raise
            self._pending[seq] = Txn(seq, app, int(version), tag)
            return seq

    def append(self, batch: pa.RecordBatch, *, txn_id: int = 0) -> int:
        """Append ``batch`` to the WAL (durable at the next flush) and the open segment."""
        return self.append_batches([batch], txn_id=txn_id)

    def append_batches(self, batches: list[pa.RecordBatch], *, txn_id: int = 0) -> int:
        """Append batches of one schema as one unit; returns the seq of the last one.

        Every check that can refuse them runs before the first record is written. A
        failed WAL write or fsync keeps none of them (nothing of a call that raised
        is ever read back, §7.4), so the caller retries the whole call. Once the
        records are written the call succeeds: a finalize it triggers that fails is
        kept in :attr:`maintenance_error` (and retried by the next finalize or
        maintenance tick), never raised, so a caller never retries a written record.
        """
        if not batches:
            raise ValueError("append_batches needs at least one batch")
        schema = batches[0].schema
        if any(not b.schema.equals(schema) for b in batches[1:]):
            raise ValueError("the batches of one append must share one schema")
        with self._lock:
            self._ready()
            if txn_id and txn_id not in self._pending:
                raise ValueError(f"unknown or already decided transaction {txn_id}")
            self._make_room(sum(b.nbytes for b in batches), len(batches))
            open_schema = self._open.schema
            if not txn_id and open_schema is not None and not schema.equals(open_schema):
                self._finalize()  # a segment holds one schema: seal before writing
            ns = time.time_ns()
            first = self.wal.next_seq
            try:
                seqs = self.wal.append_batches(batches, ingestion_ns=ns, txn_id=txn_id)
            except WalFailedError as e:
                self._failure.failed_call(first)
                self._poison(e)
                self._failure.reported(e)
                raise
            self.last_write_ns = ns
            records = [(seq, ns, b) for seq, b in zip(seqs, batches, strict=True)]
            if txn_id:
                txn = self._pending[txn_id]
                if txn.first_mono is None:
                    txn.first_mono = time.monotonic()
                txn.records.extend(records)
                return seqs[-1]
            self._admitting = set(seqs)
            try:
                for i, (seq, _, b) in enumerate(records):
                    self._open.add(seq, ns, b)
                    self._admitting.discard(seq)
                    if self._open.nbytes < self.config.segment.target_size_bytes:
                        continue
                    try:
                        self._finalize()
                    except Exception as e:  # the records are written: report, not raise
                        if i + 1 < len(records):  # the rest is only in the WAL: replayed
                            self._poison(e)
                        self._maintenance_failed("finalize after append", e)
                        break
            finally:
                self._admitting = set()
            return seqs[-1]

    def _maintenance_failed(self, what: str, e: BaseException) -> None:
        self.maintenance_error = e
        log.error("quiver.maintenance.deferred partition=%s during=%s: %s", self.pid, what, e)

    def flush(self) -> int:
        """Barrier: every append made before the call is durable on return."""
        with self._lock:
            self._ready()
            wal = self.wal
        try:
            return wal.flush()
        except (WalFailedError, StoreClosedError) as e:
            with self._lock:
                if wal is not self.wal and not wal.failed:
                    # recovered meanwhile by another thread: closing the old WAL
                    # flushed every record it held; the new one holds the rest
                    return self.flush()
                if isinstance(e, WalFailedError):
                    if wal is self.wal:
                        self._poison(e)
                    self._failure.reported(e)
            raise

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
        # object root: a transaction's rows stay in one segment (but for a schema change
        # within it), so a MANIFEST entry that names it holds all of it (§12.6)
        whole = marker is not None and self.segments.manifest_publishes
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

    def check_fits(self, nbytes: int, batches: int = 1) -> None:
        """Refuse at once (not retryable) a batch, or the batches of one table (appended
        as one unit), that can never fit in ``wal.max_size``."""
        limit = self.config.wal.max_size_bytes
        if nbytes + fmt.WAL_HEADER_SIZE + batches * fmt.WAL_RECORD_SIZE > limit:
            what = "a batch" if batches == 1 else f"a table of {batches} batches"
            fix = "smaller batches" if batches == 1 else "several appends"
            raise BatchTooLargeError(
                f"partition {self.pid}: {what} of {nbytes} bytes can never fit in "
                f"wal.max_size={limit} bytes; split it into {fix} or raise wal.max_size"
            )

    def _make_room(self, nbytes: int, batches: int = 1) -> None:
        limit = self.config.wal.max_size_bytes
        if self.wal.total_bytes + nbytes <= limit:
            return
        self.check_fits(nbytes, batches)
        self._finalize()
        deadline = time.monotonic() + self.config.retention.backpressure_timeout_s
        while self.wal.total_bytes + nbytes > limit:
            if time.monotonic() >= deadline:
                raise StoreAtCapacityError(
                    f"partition {self.pid}: WAL at {self.wal.total_bytes} bytes of wal.max_size "
                    f"{limit} and undecided transactions pin it; retry later"
                )
            time.sleep(0.05)
            self._resolve()
            self._finalize()

    # -- transactions ------------------------------------------------------------------
    def _resolve(self, *, backoff: bool = False) -> None:
        """Move committed transactions into the open segment; drop losers.

        ``backoff`` (the maintenance tick's calls, on an object root, where each look
        is a request): a transaction undecided :data:`RESOLVE_GRACE_S` after its first
        record is looked at again after 1 s, then 2, 4... at most every
        :data:`RESOLVE_CAP_S` (a batch never rerun stays pending for good)."""
        now = time.monotonic()
        patient = backoff and self.commits.on_objects
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

    def pending_txn(self, txn_id: int) -> tuple[str, int, list[pa.RecordBatch]]:
        """``(app, version, batches)`` of a transaction not decided yet (ValueError if
        it is unknown or decided)."""
        with self._lock:
            self._ready()
            txn = self._pending.get(txn_id)
            if txn is None:
                raise ValueError(f"unknown or already decided transaction {txn_id}")
            return txn.app, txn.version, [b for _, _, b in txn.records]

    def stage_stamp(self, txn_id: int) -> int:
        """The stamp of pending transaction ``txn_id``'s staged object: the ingestion
        time of its first record, which its WAL keeps, so every retry (after a lost
        response, an in-place recovery or a restart) encodes the same bytes; 0 when it
        has no record (ValueError if it is unknown or decided)."""
        with self._lock:
            self._ready()
            txn = self._pending.get(txn_id)
            if txn is None:
                raise ValueError(f"unknown or already decided transaction {txn_id}")
            return txn.records[0][1] if txn.records else 0

    def pending_txns(self) -> list[tuple[int, str, int, str]]:
        with self._lock:
            return [(t.txn_id, t.app, t.version, t.tag) for t in self._pending.values()]

    def confirm_lease(self) -> None:
        """Object root: this writer still holds its lease at its epoch (one GET of the
        LEASE); :class:`LeaseLostError` when another holder took it over (§12.6: what
        it staged before the call is then listed by any later holder's open)."""
        if self.lease is not None:
            self.lease.confirm()

    def note_foreign(self, txn_id: int) -> None:
        """Object root: the staged object under ``txn_id`` holds another incarnation's
        transaction (met where this writer staged its own): resolved like those its
        open listed, and kept out of the transaction floor until then (§12.6)."""
        with self._lock:
            if self.lease is not None and not self._closed:
                self._staged.note(txn_id)

    # -- finalize and publication ------------------------------------------------------
    def _check_lease(self) -> None:
        """Before a publication on an object root: the writer still holds its lease
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
                if self.segments.manifest_publishes:
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
                else:
                    self.segments.publish(self._unpublished)
            except BaseException as e:
                self._poison(e)
                raise
            self.last_published = self._unpublished
            self._unpublished = None
            self._drop_staged(self._unpublished_txns)
            self._unpublished_txns = ()

    def _txn_floor(self) -> int:
        """Object root: the ``txn_floor`` to record (§12.6): below the lowest
        transaction this writer has not sealed yet (pending, committed in the open
        segment, being admitted, or another incarnation's it looks at), else its
        highest id; capped as :meth:`StagedBook.floor` says."""
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

    def finalize(self) -> SegmentMeta | None:
        """Seal the open segment into a published segment; None when it is empty."""
        with self._lock:
            self._ready()
            try:
                return self._finalize()
            except BaseException as e:
                self._failure.reported(e)
                raise

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
        txns = tuple(seg.txns) if self.segments.manifest_publishes else ()
        if self.segments.manifest_publishes:
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

    def _state_durable(self, state: dict) -> None:
        """Write the STATE just read again, atomically, before acting on it.

        The STATE read may be one whose rename is not durable yet (the directory fsync
        after it failed in this process, or the process that wrote it died before the
        fsync): a segment published on its word, with the old STATE back after a power
        loss, would be read beside the WAL records the old STATE replays.
        """
        self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, state))

    # -- recovery: applying the plans of .recovery (§7.3) ------------------------------
    def _recover(self, *, republish: bool = False) -> RecoveryReport:
        """Rebuild the in-memory state from disk (§7.3); ``republish``: write the
        ``.meta`` of STATE's ``publishing`` segment again even if it exists (its name
        may not be durable after a publication that failed in this process).

        The reads and decisions are :mod:`.recovery`'s; what is written, removed and
        replayed, in this order, is here (the fence first on an object root, §12.7)."""
        t0 = time.monotonic()
        rep = RecoveryReport(partition=self.pid)
        self._open = OpenSegment()
        self._pending = {}
        self._unpublished = None
        self._unpublished_txns = ()
        self._admitting = set()
        state = read_state(self.io, self.state_path)
        self._covered = RangeSet(tuple(r) for r in state["covered"])
        self._next_seq = int(state["next_seq"])
        on_objects = self.segments.manifest_publishes
        deleted = deleted_marks(state, self.pid, self._deleted, on_objects=on_objects)
        fenced_manifest = None
        if on_objects:
            self._check_lease()  # a fenced writer learns it here, before touching anything
            # fence first (§12.4): the MANIFEST is brought to this writer's epoch before
            # anything else is written or removed, so every earlier holder's manifest
            # change fails from here on, and a higher epoch there fences this writer
            fenced_manifest = self.segments.sync_manifest(self.pid)
        publishing = plan_publishing(
            state, deleted, self.segments, self.pid, self.state_path, republish=republish
        )
        rep.republished_seq = self._settle_publishing(publishing, state)
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
        self._next_seq = next_segment_seq(
            self._next_seq, deleted, cleanup, manifest, on_objects=on_objects
        )
        # object root (§12.6): transactions another holder sealed are never sealed
        # again, and this writer's transaction ids start above every id the MANIFEST
        # or a staged object names (no id of another incarnation is ever reused)
        staged = list_staged(self.segments, self.pid, manifest)
        plan = plan_recovery(manifest, staged, covered=self._covered, on_objects=on_objects)
        if plan.staged is not None:
            self._drop_staged(plan.garbage)
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
            self._covered.add(wal.next_record_seq, next_record_seq - 1)
        self.wal = WalWriter(
            self.wal_dir, self.config.wal, next_record_seq=next_record_seq, io=self.io
        )
        old = time.monotonic() - self.config.segment.max_open_duration_s
        if plan.staged is not None:
            # before anything is replayed (a replay may seal a segment, and its
            # publication records the txn floor): every staged transaction the MANIFEST
            # does not name is foreign, so the floor stays below it; those the WAL
            # turns out to hold are taken back after the replay
            self._staged.adopt(plan.unsealed, ())
        if on_objects:
            # the listing above may lag behind the bucket: the floor this writer records
            # stays at the MANIFEST's until a later listing is taken into account
            self._staged.ceiling = plan.txn_ceiling
        self._recovering = True  # no WAL file is deleted before the whole WAL is replayed
        try:
            self._replay(replay(wal, self._covered, old), rep, old)
            # named by the MANIFEST, or at or below its txn_floor (sealed or decided
            # against: a retired transaction txns_gone no longer names is never sealed
            # again, §12.6)
            for txn_id in plan.retired(self._pending):
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
        if plan.staged is not None:
            # staged transactions neither this WAL nor the MANIFEST holds (a lost disk,
            # §12.6): this writer holds the lease, so no observer seals them; it seals
            # the committed ones itself (``_seal_foreign``), next look at once
            self._staged.adopt(
                plan.unsealed, {*self._pending, *self._open.txns, *self._unpublished_txns}
            )
        if (
            publishing.action is not Publishing.NONE
            or rep.torn_tails
            or state.get("next_seq") != self._next_seq
            or "partition" not in state
            or skipped
        ):
            self._write_state(None)
        self._truncate_wal()
        rep.next_segment_seq = self._next_seq
        rep.duration_s = time.monotonic() - t0
        if rep.records_scanned or rep.torn_tails or rep.removed_files:
            log.info("quiver.recovery %s", rep.summary())
        return rep

    def _settle_publishing(self, plan: PublishingPlan, state: dict) -> int | None:
        """Carry out ``plan`` for the segment ``state`` names as ``publishing`` (§7.3
        step 2; §12.4 on an object root, where a move makes ``state`` name the moved
        segment); returns the seq published, if any."""
        meta = plan.meta
        if plan.action is Publishing.SEALED_ELSEWHERE and meta is not None:
            self._covered = minus(self._covered, meta.wal_ranges)
        if not plan.rewrites_state or meta is None:
            return None
        self._state_durable(state)

        def commit(moved: SegmentMeta) -> None:
            self._next_seq = moved.seq + 1
            state["next_seq"] = moved.seq + 1
            state["publishing"] = moved.to_body()
            self._state_durable(state)

        try:
            if plan.action is Publishing.OWN:
                own = publish_own(
                    self.segments,
                    self.pid,
                    meta,
                    next_seq=self._next_seq,
                    commit=commit,
                    txns=plan.txns,
                )
                self._drop_staged(plan.txns)
                return own.seq
            if plan.action is Publishing.AGAIN:
                self.segments.publish(meta, again=True)
            else:
                self.segments.publish(meta)
            return meta.seq
        except SegmentMissingError as e:
            if e.kind != "missing":
                raise
        listed = self.segments.manifest_copy(self.pid) if plan.action is Publishing.OWN else None
        if gone_unpublished(plan, self.pid, listed, acks_known=self._deleted is not None):
            self._covered = minus(self._covered, meta.wal_ranges)
        return None

    def _replay(self, steps: Iterator[Txn | Replayed], rep: RecoveryReport, old: float) -> None:
        """Replay the WAL records not yet inside durable segments (§7.3 step 5): the
        steps of :func:`~.recovery.replay` open pending transactions, join them, or
        join the open segment (which may finalize)."""
        for step in steps:
            if isinstance(step, Txn):
                self._pending[step.txn_id] = step
                continue
            rep.records_replayed += 1
            rep.rows_replayed += step.batch.num_rows
            if step.discarded:
                continue
            if step.txn_id:
                self._pending[step.txn_id].records.append((step.seq, step.ingestion_ns, step.batch))
            else:
                self._admit([(step.seq, step.ingestion_ns, step.batch)], since=old)

    # -- maintenance and status ---------------------------------------------------------
    def maintain(self) -> SegmentMeta | None:
        """Resolve decided transactions and finalize an open segment past its age.

        A failure is kept in :attr:`maintenance_error` and raised; the next tick
        retries (recovering the partition first when the failure discarded its
        state). A WAL failure that waits to be reported to a caller of append, flush,
        finalize or begin does not stop a tick: it recovers and seals what calls that
        returned wrote, and the report stays pending for that caller (§7.4).
        """
        with self._lock:
            if self._closed:
                return None
            try:
                self._ready(foreground=False)
                self._publish_pending()
                self._seal_foreign()
                self._resolve(backoff=True)
                due = self._open and (
                    time.monotonic() - self._open.opened_mono
                    >= self.config.segment.max_open_duration_s
                    or self._open.nbytes >= self.config.segment.target_size_bytes
                )
                meta = self._finalize() if due else None
            except Exception as e:
                self._maintenance_failed("maintenance", e)
                raise
            self.maintenance_error = None
            return meta

    def write_heartbeat(self) -> None:
        """Publish this writer's live state for other processes (``quiver status``).

        Advisory (§6 HEARTBEAT): replaced atomically by rename but not fsynced; a
        reader treats a heartbeat whose writer no longer holds the lock as stale. A
        handle that holds the partition's lease only to seal what a gone writer left
        (:data:`~quiver_spark.control.lease.PURPOSE_SEALER`) keeps naming that writer: the
        ``pid`` and ``last_write_ns`` of the heartbeat it replaces.
        """
        body = self.status()
        body["pending"] = [
            [t.txn_id, t.app, t.version, t.tag]
            for t in sorted(self._pending.values(), key=lambda t: t.txn_id)[:HEARTBEAT_PENDING]
        ]
        body["pid"] = os.getpid()
        body["written_ns"] = time.time_ns()
        body["open_since_ns"] = (
            body["written_ns"] - int(body["open_segment_age_s"] * 1e9) if self._open else None
        )
        path = os.path.join(self.dir, fmt.HEARTBEAT_FILE)
        if self.lease is not None and self.lease.holder.purpose == PURPOSE_SEALER:
            try:
                before = fmt.decode_frame(path, fmt.MAGIC_HEARTBEAT, self.io.read_file(path))
            except (OSError, CorruptionError):
                before = {}
            body["pid"] = before.get("pid")
            body["last_write_ns"] = before.get("last_write_ns")
        try:
            self.io.write_advisory(path, fmt.encode_frame(fmt.MAGIC_HEARTBEAT, body))
        except OSError as e:  # advisory: a full disk must not fail the work around it
            log.warning("quiver.heartbeat.not_written partition=%s: %s", self.pid, e)

    def status(self) -> dict:
        with self._lock:
            return {
                "partition": self.pid,
                "open_segment_bytes": self._open.nbytes,
                "open_segment_rows": self._open.rows,
                "open_segment_age_s": (
                    time.monotonic() - self._open.opened_mono if self._open else 0.0
                ),
                "pending_txns": len(self._pending),
                "wal_bytes": self.wal.total_bytes if not self._closed else 0,
                "next_segment_seq": self._next_seq,
                "last_write_ns": self.last_write_ns,
                "finalized_total": self.finalized_total,
                "maintenance_error": (
                    None if self.maintenance_error is None else str(self.maintenance_error)
                ),
            }

    # -- a failed I/O in a process that goes on (§7.4) ------------------------------------
    def _poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`FailureState.poison`)."""
        self._failure.poison(e, self.wal)

    def _ready(self, *, foreground: bool = True) -> None:
        """Make the writer usable for the next operation (caller holds the lock).

        Raises a WAL failure nobody was told of to a foreground caller (once); then
        rebuilds a discarded state through recovery. A background caller (a tick)
        rebuilds too, so what calls that returned wrote is sealed without waiting for a
        caller, but leaves the report of the failure for the next foreground call.
        """
        self._check_open()
        failure = self._failure
        if failure.broken is None and self.wal.failed:
            self._poison(self.wal.failure or WalFailedError(0, "wal writer failed"))
        if failure.unreported_wal is not None and foreground:
            e, failure.unreported_wal = failure.unreported_wal, None
            raise e
        if failure.broken is not None:
            unreported = failure.unreported_wal
            try:
                self._rebuild()
            except WalFailedError:
                if foreground:
                    failure.unreported_wal = None
                raise
            if not foreground:  # a tick recovers; the report still waits for a caller
                failure.unreported_wal = failure.unreported_wal or unreported

    def _rebuild(self) -> None:
        """Recover the partition from disk in place, keeping the partition lock.

        The old WAL writer is closed first (its written records are flushed unless it
        failed: a failed file is never synced again). After a WAL failure the failed
        file is cut for good and the records it may not hold durably are written again
        into a new file (:meth:`FailureState.settle`); recovery then reads the WAL, and
        the records it replays into the open segment are sealed at once.
        """
        failure = self._failure
        cause = failure.broken
        try:
            self.wal.close()  # idempotent; raises once if its last flush fails
        except WalFailedError as e:
            failure.unreported_wal = e
            failure.seal_on_recovery = True
            raise
        try:
            failure.settle(self.wal, self.wal_dir, self.io, self.state_path, self.config.wal)
            self.recovery = self._recover(republish=True)
            if failure.seal_on_recovery and self._open:
                self._finalize()
        except BaseException as e:
            failure.broken = e
            try:
                self.wal.close()
            except Exception as close_error:  # never opened a file: nothing to lose
                log.warning("quiver.writer.close_failed partition=%s: %s", self.pid, close_error)
            raise
        failure.recovered()
        log.warning(
            "quiver.writer.recovered partition=%s after=%s %s",
            self.pid,
            cause,
            self.recovery.summary(),
        )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"partition {self.pid} writer is closed")

    def close(self, *, finalize: bool = True) -> None:
        """Finalize committed data (unless told not to), sync and release the lock.

        A writer whose state was discarded after a failure does not finalize: its data
        is in the WAL, which the next open recovers. A close is not a crash: after a
        failed WAL write or fsync it settles the failed file first (§7.4 steps 1-3: the
        cut in STATE, the records of calls that returned written again), so the next
        open never reads the records of the call that raised; if that cannot be done
        (the disk still full) it says so. A WAL failure no caller was told of is raised
        once everything is released.
        """
        with self._lock:
            if self._closed:
                return
            unreported: BaseException | None = None
            unsettled: BaseException | None = None
            failure = self._failure
            try:
                if failure.broken is None and self.wal.failed:
                    self._poison(self.wal.failure or WalFailedError(0, "wal writer failed"))
                unreported = failure.unreported_wal
                if finalize and failure.broken is None:
                    self._resolve()
                    self._finalize()
                    self.write_heartbeat()  # status must not show a sealed segment as open
            finally:
                self._closed = True
                try:
                    self.wal.close()
                finally:
                    try:
                        unsettled = failure.settle_on_close(
                            self.wal, self.wal_dir, self.io, self.state_path, self.config.wal
                        )
                    finally:
                        self._flock.release()
                        if self.lease is not None:
                            self.lease.release()
            if unsettled is not None:
                failure.unreported_wal = None
                raise unsettled
            if unreported is not None:
                failure.unreported_wal = None
                raise unreported
