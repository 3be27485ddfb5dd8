"""The live writer of one store partition: appends, transactions, finalize, maintenance.

A :class:`PartitionWriter` owns a partition exclusively (``flock`` on its LOCK file)
for its lifetime. Appends go to the WAL and to the in-memory open segment; records
of a transaction wait in ``pending`` until its commit record decides them (§10).
Finalize writes the open segment as an immutable Arrow IPC file, commits the
partition STATE (the commit point), then publishes the segment's metadata and
truncates WAL files nobody needs (§9): :class:`~.sealing.Sealing`. Opening, and
the next call after a failure (§9.4), rebuild the state from disk: :mod:`.recovery`
reads and returns plans, :class:`~.rebuild.Rebuild` applies them. The writer owns the
partition's state, in groups by concern (:mod:`.state`), and its lock, and gives each
of the two the groups it uses; neither calls the writer nor takes the lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pyarrow as pa

from .. import format as fmt
from .. import layout
from ..commits import CommitLog
from ..config import StoreConfig, validate_name
from ..errors import (
    BatchTooLargeError,
    CorruptionError,
    InvalidArgumentError,
    StoreAtCapacityError,
    StoreClosedError,
    UnknownTransactionError,
    WalFailedError,
)
from ..fs import DEFAULT_IO, FileIO, PartitionLock
from ..seams import DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..wal import WalWriter, encode_txn
from .model import HEARTBEAT_PENDING, NO_LEASE, RecoveryReport, Txn, WriterLease
from .rebuild import Rebuild
from .sealing import Sealing
from .staged import StagedBook
from .state import Lifecycle, PartitionHandles, SealedSegments, UnsealedRows, WalLedger

log = logging.getLogger(__name__)


class PartitionWriter:
    """Exclusive writer of one partition. Thread-safe; use through QuiverStore.

    It owns the partition's state, in groups (:mod:`.state`): :attr:`handles`,
    :attr:`ledger`, :attr:`rows`, :attr:`sealed`, :attr:`life` and :attr:`staged`,
    and :attr:`lock`, which guards them all; it hands its two collaborators the groups
    they use: :attr:`sealing` (admission and finalize) and :attr:`rebuild` (recovery,
    which seals through the same :attr:`sealing`)."""

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
        lease: WriterLease = NO_LEASE,
    ) -> None:
        self.lock = threading.RLock()
        """Guards every group of the state below; the collaborators never take it."""
        self.handles = PartitionHandles(
            pid=pid,
            wal_root=wal_root,
            config=config,
            segments=segments,
            commits=commits,
            io=io,
            deleted=deleted,
            lease=lease,
        )
        self.ledger = WalLedger(self.handles)
        self.rows = UnsealedRows()
        self.sealed = SealedSegments()
        self.life = Lifecycle(self.handles.pid)
        self.staged = StagedBook(segments, self.handles.pid)
        """Object root: the staged transactions of this partition it keeps track of
        (failed deletes, another incarnation's, the floor's ceiling; §10.2)."""
        self._last_write_ns: int | None = None
        self.sealing = Sealing(
            self.handles, self.ledger, self.rows, self.sealed, self.life, self.staged
        )
        """Admission into the open segment and its finalize (§9.2)."""
        self.rebuild = Rebuild(
            self.handles, self.ledger, self.rows, self.sealed, self.life, self.staged, self.sealing
        )
        """Recovery at open and in place after a failure (§9.3, §9.4)."""
        io.mkdir(self.wal_dir)
        self._flock = PartitionLock.acquire(os.path.join(self.dir, layout.lock_file_name()))
        try:
            self.rebuild.report = self.rebuild.recover()
        except BaseException:
            if hasattr(self.ledger, "wal"):  # stop its flusher thread; it never opened a file
                try:
                    self.ledger.wal.close()
                except Exception as e:
                    log.warning("quiver.writer.close_failed partition=%s: %s", self.pid, e)
            self._flock.release()
            raise

    # -- what the state says -----------------------------------------------------------
    @property
    def pid(self) -> str:
        return self.handles.pid

    @property
    def config(self) -> StoreConfig:
        return self.handles.config

    @config.setter
    def config(self, config: StoreConfig) -> None:
        self.handles.reconfigure(config)

    @property
    def lease(self) -> WriterLease:
        """The partition's writer lease (§8.2), released at close: on a POSIX root
        :data:`~.model.NO_LEASE`."""
        return self.handles.lease

    @property
    def io(self) -> FileIO:
        return self.handles.io

    @property
    def dir(self) -> str:
        return self.handles.dir

    @property
    def wal_dir(self) -> str:
        return self.handles.wal_dir

    @property
    def state_path(self) -> str:
        return self.handles.state_path

    @property
    def wal(self) -> WalWriter:
        return self.ledger.wal

    @property
    def recovery(self) -> RecoveryReport:
        """What the last recovery found (at open, or in place after a failure)."""
        return self.rebuild.report

    @property
    def last_write_ns(self) -> int | None:
        return self._last_write_ns

    @property
    def finalized_total(self) -> int:
        return self.sealed.finalized_total

    @property
    def last_finalized(self) -> SegmentMeta | None:
        return self.sealed.last_finalized

    @property
    def last_published(self) -> SegmentMeta | None:
        return self.sealed.last_published

    @property
    def maintenance_error(self) -> BaseException | None:
        """Why the last maintenance (or a finalize an append triggered) failed; None
        after a tick that succeeded."""
        return self.life.maintenance_error

    # -- appends -------------------------------------------------------------------
    def begin_txn(self, app: str, version: int, tag: str = "") -> int:
        """Start a transaction; returns its id (the seq of its REC_TXN record)."""
        validate_name("transaction app id", app)
        with self.lock:
            self.rebuild.ready()
            payload = encode_txn(app, int(version), tag)
            first = self.ledger.wal.next_seq
            try:
                seq = self.ledger.wal.append(fmt.REC_TXN, payload, ingestion_ns=time.time_ns())
            except WalFailedError as e:
                self.life.failure.failed_call(first)
                self._poison(e)
                self.life.failure.reported(e)
                raise
            self.rows.begin(Txn(seq, app, int(version), tag))
            return seq

    def append(self, batch: pa.RecordBatch, *, txn_id: int = 0) -> int:
        """Append ``batch`` to the WAL (durable at the next flush) and the open segment."""
        return self.append_batches([batch], txn_id=txn_id)

    def append_batches(self, batches: list[pa.RecordBatch], *, txn_id: int = 0) -> int:
        """Append batches of one schema as one unit; returns the seq of the last one.

        Every check that can refuse them runs before the first record is written. A
        failed WAL write or fsync keeps none of them (nothing of a call that raised
        is ever read back, §9.4), so the caller retries the whole call. Once the
        records are written the call succeeds: a finalize it triggers that fails is
        kept in :attr:`maintenance_error` (and retried by the next finalize or
        maintenance tick), never raised, so a caller never retries a written record.
        """
        if not batches:
            raise InvalidArgumentError(
                "batches", 0, "at least one batch", "append_batches needs at least one batch"
            )
        schema = batches[0].schema
        if any(not b.schema.equals(schema) for b in batches[1:]):
            raise InvalidArgumentError(
                "batches",
                len(batches),
                "batches of one schema",
                "the batches of one append must share one schema",
            )
        with self.lock:
            self.rebuild.ready()
            if txn_id and txn_id not in self.rows.pending:
                raise UnknownTransactionError(self.handles.pid, txn_id)
            self._make_room(sum(b.nbytes for b in batches), len(batches))
            open_schema = self.rows.open.schema
            if not txn_id and open_schema is not None and not schema.equals(open_schema):
                self.sealing.finalize()  # a segment holds one schema: seal before writing
            ns = time.time_ns()
            first = self.ledger.wal.next_seq
            try:
                seqs = self.ledger.wal.append_batches(batches, ingestion_ns=ns, txn_id=txn_id)
            except WalFailedError as e:
                self.life.failure.failed_call(first)
                self._poison(e)
                self.life.failure.reported(e)
                raise
            self._last_write_ns = ns
            records = [(seq, ns, b) for seq, b in zip(seqs, batches, strict=True)]
            if txn_id:
                self.rows.appended(txn_id, records)
                return seqs[-1]
            self.rows.admitting_seqs(seqs)
            try:
                for i, (seq, _, b) in enumerate(records):
                    self.rows.add(seq, ns, b)
                    self.rows.admitted(seq)
                    if self.rows.open.nbytes < self.config.segment.target_size_bytes:
                        continue
                    try:
                        self.sealing.finalize()
                    except Exception as e:  # the records are written: report, not raise
                        if i + 1 < len(records):  # the rest is only in the WAL: replayed
                            self._poison(e)
                        self._maintenance_failed("finalize after append", e)
                        break
            finally:
                self.rows.admitted_all()
            return seqs[-1]

    def _poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`~.state.Lifecycle.poison`, §9.4)."""
        self.life.poison(e, self.ledger.wal)

    def _maintenance_failed(self, what: str, e: BaseException) -> None:
        self.life.deferred(e)
        log.error("quiver.maintenance.deferred partition=%s during=%s: %s", self.pid, what, e)

    def flush(self) -> int:
        """Barrier: every append made before the call is durable on return."""
        with self.lock:
            self.rebuild.ready()
            wal = self.ledger.wal
        try:
            return wal.flush()
        except (WalFailedError, StoreClosedError) as e:
            with self.lock:
                if wal is not self.ledger.wal and not wal.failed:
                    # recovered meanwhile by another thread: closing the old WAL
                    # flushed every record it held; the new one holds the rest
                    return self.flush()
                if isinstance(e, WalFailedError):
                    if wal is self.ledger.wal:
                        self._poison(e)
                    self.life.failure.reported(e)
            raise

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
        if self.ledger.wal.total_bytes + nbytes <= limit:
            return
        self.check_fits(nbytes, batches)
        self.sealing.finalize()
        deadline = time.monotonic() + self.config.retention.backpressure_timeout_s
        while self.ledger.wal.total_bytes + nbytes > limit:
            if time.monotonic() >= deadline:
                raise StoreAtCapacityError(
                    f"partition {self.pid}: WAL at {self.ledger.wal.total_bytes} bytes of wal.max_size "
                    f"{limit} and undecided transactions pin it; retry later"
                )
            time.sleep(0.05)
            self.sealing.resolve()
            self.sealing.finalize()

    # -- transactions ------------------------------------------------------------------
    def pending_txn(self, txn_id: int) -> tuple[str, int, list[pa.RecordBatch]]:
        """``(app, version, batches)`` of a transaction not decided yet (ValueError if
        it is unknown or decided)."""
        with self.lock:
            self.rebuild.ready()
            txn = self.rows.pending.get(txn_id)
            if txn is None:
                raise UnknownTransactionError(self.handles.pid, txn_id)
            return txn.app, txn.version, [b for _, _, b in txn.records]

    def stage_stamp(self, txn_id: int) -> int:
        """The stamp of pending transaction ``txn_id``'s staged object: the ingestion
        time of its first record, which its WAL keeps, so every retry (after a lost
        response, an in-place recovery or a restart) encodes the same bytes; 0 when it
        has no record (ValueError if it is unknown or decided)."""
        with self.lock:
            self.rebuild.ready()
            txn = self.rows.pending.get(txn_id)
            if txn is None:
                raise UnknownTransactionError(self.handles.pid, txn_id)
            return txn.records[0][1] if txn.records else 0

    def pending_txns(self) -> list[tuple[int, str, int, str]]:
        with self.lock:
            return [(t.txn_id, t.app, t.version, t.tag) for t in self.rows.pending.values()]

    def confirm_lease(self) -> None:
        """Object root: this writer still holds its lease at its epoch (one GET of the
        LEASE); :class:`LeaseLostError` when another holder took it over (§10.2: what
        it staged before the call is then listed by any later holder's open)."""
        self.lease.confirm()

    def note_foreign(self, txn_id: int) -> None:
        """Object root: the staged object under ``txn_id`` holds another incarnation's
        transaction (met where this writer staged its own): resolved like those its
        open listed, and kept out of the transaction floor until then (§10.2)."""
        with self.lock:
            if not self.life.closed:
                self.staged.note(txn_id)

    # -- finalize, maintenance and status -----------------------------------------------
    def finalize(self) -> SegmentMeta | None:
        """Seal the open segment into a published segment; None when it is empty."""
        with self.lock:
            self.rebuild.ready()
            try:
                return self.sealing.finalize()
            except BaseException as e:
                self.life.failure.reported(e)
                raise

    def maintain(self) -> SegmentMeta | None:
        """Resolve decided transactions and finalize an open segment past its age.

        A failure is kept in :attr:`maintenance_error` and raised; the next tick
        retries (recovering the partition first when the failure discarded its
        state). A WAL failure that waits to be reported to a caller of append, flush,
        finalize or begin does not stop a tick: it recovers and seals what calls that
        returned wrote, and the report stays pending for that caller (§9.4).
        """
        with self.lock:
            if self.life.closed:
                return None
            try:
                self.rebuild.ready(foreground=False)
                self.sealing.publish_pending()
                self.sealing.look_held()
                self.sealing.seal_foreign()
                self.sealing.resolve(backoff=True)
                due = self.rows.open and (
                    time.monotonic() - self.rows.open.opened_mono
                    >= self.config.segment.max_open_duration_s
                    or self.rows.open.nbytes >= self.config.segment.target_size_bytes
                )
                meta = self.sealing.finalize() if due else None
            except Exception as e:
                self._maintenance_failed("maintenance", e)
                raise
            self.life.maintained()
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
            for t in sorted(self.rows.pending.values(), key=lambda t: t.txn_id)[:HEARTBEAT_PENDING]
        ]
        body["pid"] = os.getpid()
        body["written_ns"] = time.time_ns()
        body["open_since_ns"] = (
            body["written_ns"] - int(body["open_segment_age_s"] * 1e9) if self.rows.open else None
        )
        path = os.path.join(self.dir, layout.heartbeat_file_name())
        if self.lease.sealer:
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
        with self.lock:
            return {
                "partition": self.pid,
                "open_segment_bytes": self.rows.open.nbytes,
                "open_segment_rows": self.rows.open.rows,
                "open_segment_age_s": (
                    time.monotonic() - self.rows.open.opened_mono if self.rows.open else 0.0
                ),
                "pending_txns": len(self.rows.pending),
                # held on a damaged staged object (§10.2): pending until it is repaired
                # or removed
                "held_txns": sorted(self.staged.held),
                "wal_bytes": self.ledger.wal.total_bytes if not self.life.closed else 0,
                "next_segment_seq": self.ledger.next_seq,
                "last_write_ns": self._last_write_ns,
                "finalized_total": self.finalized_total,
                "maintenance_error": (
                    None
                    if self.life.maintenance_error is None
                    else str(self.life.maintenance_error)
                ),
            }

    # -- close -----------------------------------------------------------------------------
    def close(self, *, finalize: bool = True) -> None:
        """Finalize committed data (unless told not to), sync and release the lock.

        A writer whose state was discarded after a failure does not finalize: its data
        is in the WAL, which the next open recovers. A close is not a crash: after a
        failed WAL write or fsync it settles the failed file first (§9.4 steps 1-3: the
        cut in STATE, the records of calls that returned written again), so the next
        open never reads the records of the call that raised; if that cannot be done
        (the disk still full) it says so. A WAL failure no caller was told of is raised
        once everything is released.
        """
        with self.lock:
            if self.life.closed:
                return
            unreported: BaseException | None = None
            unsettled: BaseException | None = None
            failure = self.life.failure
            try:
                if failure.broken is None and self.ledger.wal.failed:
                    self._poison(self.ledger.wal.failure or WalFailedError(0, "wal writer failed"))
                unreported = failure.unreported_wal
                if finalize and failure.broken is None:
                    self.sealing.resolve()
                    self.sealing.finalize()
                    self.write_heartbeat()  # status must not show a sealed segment as open
            finally:
                self.life.close()
                try:
                    self.ledger.wal.close()
                finally:
                    try:
                        unsettled = failure.settle_on_close(
                            self.ledger.wal, self.wal_dir, self.io, self.state_path, self.config.wal
                        )
                    finally:
                        self._flock.release()
                        self.lease.release()
            if unsettled is not None:
                failure.forget_unreported()
                raise unsettled
            if unreported is not None:
                failure.forget_unreported()
                raise unreported
