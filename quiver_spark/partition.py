"""One store partition's writer: WAL, open segment, finalize, recovery.

A :class:`PartitionWriter` owns a partition exclusively (``flock`` on its LOCK file)
for its lifetime. Appends go to the WAL and to the in-memory open segment; records
of a transaction wait in ``pending`` until its commit record decides them (§9).
Finalize writes the open segment as an immutable Arrow IPC file, commits the
partition STATE (the commit point), then publishes the segment's metadata and
truncates WAL files nobody needs (§7).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa

from . import format as fmt
from .commits import CommitLog
from .config import StoreConfig, validate_name
from .errors import (
    BatchTooLargeError,
    CorruptionError,
    SegmentMissingError,
    StoreAtCapacityError,
    StoreClosedError,
    WalFailedError,
)
from .fs import DEFAULT_IO, FileIO, PartitionLock
from .ranges import RangeSet, ranges_of
from .seams import NO_DELETIONS, DeletedSegments
from .segment import SegmentLocation, SegmentMeta
from .wal import (
    WalCarry,
    WalDecoder,
    WalRecovery,
    WalWriter,
    decode_txn,
    encode_txn,
    list_wal_files,
    recover_wal,
    wal_limits,
)

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What opening a partition found and did."""

    partition: str
    wal_files: int = 0
    records_scanned: int = 0
    records_replayed: int = 0
    rows_replayed: int = 0
    torn_tails: list[tuple[str, int, int]] = field(default_factory=list)
    salvaged_skips: int = 0
    removed_files: list[str] = field(default_factory=list)
    republished_seq: int | None = None
    pending_txns: int = 0
    discarded_txns: int = 0
    next_segment_seq: int = 1
    duration_s: float = 0.0

    def summary(self) -> str:
        torn = sum(n for _, _, n in self.torn_tails)
        return (
            f"partition {self.partition}: {self.wal_files} wal files, "
            f"{self.records_replayed} records ({self.rows_replayed} rows) replayed into the open "
            f"segment, torn tail cut: {torn} bytes, {len(self.removed_files)} stale files removed, "
            f"{self.pending_txns} transactions pending, next segment {self.next_segment_seq}, "
            f"{self.duration_s * 1000:.1f} ms"
        )


@dataclass
class _Txn:
    txn_id: int
    app: str
    version: int
    tag: str
    records: list[tuple[int, int, pa.RecordBatch]] = field(default_factory=list)
    # monotonic time of the first record: the data's age counts from its append, not
    # from the commit that admits it, so visibility stays within max_open_duration
    first_mono: float | None = None


HEARTBEAT_PENDING = 256
"""Pending transactions a heartbeat lists at most (oldest first)."""


class _OpenSegment:
    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.seqs: list[int] = []
        self.rows = 0
        self.nbytes = 0
        self.min_ns = 0
        self.max_ns = 0
        self.opened_mono = 0.0

    def add(
        self, seq: int, ingestion_ns: int, batch: pa.RecordBatch, since: float | None = None
    ) -> None:
        if not self.batches:
            self.opened_mono = time.monotonic()
            self.min_ns = self.max_ns = ingestion_ns
        if since is not None:  # the age of the oldest data, not of the admission
            self.opened_mono = min(self.opened_mono, since)
        self.batches.append(batch)
        self.seqs.append(seq)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        self.min_ns = min(self.min_ns, ingestion_ns)
        self.max_ns = max(self.max_ns, ingestion_ns)

    @property
    def schema(self) -> pa.Schema | None:
        return self.batches[0].schema if self.batches else None

    def __bool__(self) -> bool:
        return bool(self.batches)


def partition_dir(wal_root: str, pid: str) -> str:
    return os.path.join(wal_root, validate_name("partition", pid))


class PartitionWriter:
    """Exclusive writer of one partition. Thread-safe; use through QuiverStore."""

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
    ) -> None:
        self.pid = validate_name("partition", pid)
        self._deleted = deleted
        self.config = config
        self.segments = segments
        self.commits = commits
        self.io = io
        self.dir = partition_dir(wal_root, pid)
        self.wal_dir = os.path.join(self.dir, fmt.WAL_DIR)
        self.state_path = os.path.join(self.dir, fmt.STATE_FILE)
        self._lock = threading.RLock()
        self._open = _OpenSegment()
        self._pending: dict[int, _Txn] = {}
        self._closed = False
        self.last_write_ns: int | None = None
        self.finalized_total = 0
        self.last_finalized: SegmentMeta | None = None
        self._unpublished: SegmentMeta | None = None
        # WAL seqs being admitted into the open segment right now: a finalize that
        # an admission triggers must not delete the WAL file holding them
        self._admitting: set[int] = set()
        self._recovering = False
        self.maintenance_error: BaseException | None = None
        # A failure that may have left the in-memory state other than what recovery
        # would rebuild from disk (§7.4): the next call discards it and recovers.
        self._broken: BaseException | None = None
        # A WAL failure no caller of append/flush/finalize/begin_txn has seen yet
        # (the background flusher's, or one a maintenance tick met): raised once to
        # the next such call, so no later flush acknowledges what it left undurable.
        self._unreported_wal: BaseException | None = None
        # set by a WAL failure, cleared once a recovery sealed what it replayed
        self._seal_on_recovery = False
        # STATE's wal_limit: WAL files cut after a failure (first seq -> last seq read)
        self._wal_limit: dict[int, int] = {}
        # first seq of the call whose WAL write or fsync raised: nothing of it is kept
        self._drop_from: int | None = None
        # a WAL failure's cut and the records to write again past it, until both are
        # durable (kept across failed attempts of the recovery)
        self._cut: tuple[int, list[WalCarry]] | None = None
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
        if self._wal_limit:
            body["wal_limit"] = sorted([k, v] for k, v in self._wal_limit.items())
        self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, body))

    def _recover(self, *, republish: bool = False) -> RecoveryReport:
        """Rebuild the in-memory state from disk (§7.3); ``republish``: write the
        ``.meta`` of STATE's ``publishing`` segment again even if it exists (its name
        may not be durable after a publication that failed in this process)."""
        t0 = time.monotonic()
        rep = RecoveryReport(partition=self.pid)
        self._open = _OpenSegment()
        self._pending = {}
        self._unpublished = None
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
        if self._deleted is not None and (state_missing or publishing):
            deleted = self._deleted.deleted_marks(self.pid)
        if publishing:
            meta = SegmentMeta.from_body(self.state_path, publishing)
            if republish and not deleted.holds(meta.seq):
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
        cleanup = self.segments.cleanup(self.pid)
        rep.removed_files.extend(cleanup.removed)
        # Seqs are allocated without gaps: an unpublished orphan's seq was never seen by
        # any reader and is reused; every seq that was published (listed, quarantined,
        # or recorded deleted in the ack log) stays below the floor for good.
        floor = max(cleanup.max_published_seq, deleted.highest) + 1
        self._next_seq = max(self._next_seq, floor)
        rep.next_segment_seq = self._next_seq

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
            wal.next_record_seq, int(state.get("next_record_seq", 1)), covered_top + 1
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
            before = len(self._pending)
            self._resolve()
            rep.discarded_txns = before - len(self._pending) if before else 0
        finally:
            self._recovering = False
        if self._open:  # recovered data is old: let maintenance finalize it promptly
            self._open.opened_mono = min(self._open.opened_mono, old)
        rep.pending_txns = len(self._pending)
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
                    self._pending[rec.seq] = _Txn(
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
                    txn = self._pending[rec.txn_id] = _Txn(
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

    def _ready(self, *, foreground: bool = True) -> bool:
        """Make the writer usable for the next operation (caller holds the lock).

        Raises a WAL failure nobody was told of to a foreground caller (once); then
        rebuilds a discarded state through recovery. Returns False (nothing done) for
        a background caller while a WAL failure waits to be reported.
        """
        self._check_open()
        if self._broken is None and self.wal.failed:
            self._poison(self.wal.failure or WalFailedError(0, "wal writer failed"))
        if self._unreported_wal is not None:
            if not foreground:
                return False
            e, self._unreported_wal = self._unreported_wal, None
            raise e
        if self._broken is not None:
            try:
                self._rebuild()
            except WalFailedError:
                if foreground:
                    self._unreported_wal = None
                raise
        return True

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
        midway keeps the cut and the records for the next attempt.
        """
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
        self._cut = None

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
                self._failed_call(first)
                self._poison(e)
                self._reported(e)
                raise
            self._pending[seq] = _Txn(seq, app, int(version), tag)
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
                self._failed_call(first)
                self._poison(e)
                self._reported(e)
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

    def _failed_call(self, first: int) -> None:
        """A call whose records start at seq ``first`` met a WAL failure: none is kept."""
        if self._drop_from is None:
            self._drop_from = first

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
                    self._reported(e)
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
        try:
            for seq, ns, batch in records:
                schema = self._open.schema
                if schema is not None and not batch.schema.equals(schema):
                    self._finalize()
                self._open.add(seq, ns, batch, since)
                self._admitting.discard(seq)
                if self._open.nbytes >= self.config.segment.target_size_bytes:
                    self._finalize()
            if marker is not None:
                self._open.seqs.append(marker)
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
    def _resolve(self) -> None:
        """Move committed transactions into the open segment; drop losers."""
        for txn_id in sorted(self._pending):
            txn = self._pending[txn_id]
            rec = self.commits.get(txn.app, txn.version)
            if rec is None:
                continue
            del self._pending[txn_id]
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

    def pending_txns(self) -> list[tuple[int, str, int, str]]:
        with self._lock:
            return [(t.txn_id, t.app, t.version, t.tag) for t in self._pending.values()]

    # -- finalize ------------------------------------------------------------------
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
                self.segments.publish(self._unpublished)
            except BaseException as e:
                self._poison(e)
                raise
            self._unpublished = None

    def finalize(self) -> SegmentMeta | None:
        """Seal the open segment into a published segment; None when it is empty."""
        with self._lock:
            self._ready()
            try:
                return self._finalize()
            except BaseException as e:
                self._reported(e)
                raise

    def _finalize(self) -> SegmentMeta | None:
        self._publish_pending()
        seg = self._open
        batches = seg.batches
        if not batches:
            if seg.seqs:  # only transaction markers: nothing to publish, but covered
                for lo, hi in ranges_of(seg.seqs):
                    self._covered.add(lo, hi)
                self._open = _OpenSegment()
            return None
        seq = self._next_seq
        # A failure here changes nothing recovery would not redo: the rows stay open
        # and the retry writes the same seq again (any orphan .arrow is replaced).
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
        try:
            for lo, hi in meta.wal_ranges:
                self._covered.add(lo, hi)
            self._next_seq = seq + 1
            # commit point: these rows now belong to ``meta``. A failed write may
            # have replaced STATE all the same (its directory fsync failed after the
            # rename): only recovery knows, so the state is discarded (§7.4).
            self._write_state(meta)
            self._open = _OpenSegment()
            self._unpublished = meta
            self._publish_pending()
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

    # -- maintenance and status ---------------------------------------------------------
    def maintain(self) -> SegmentMeta | None:
        """Resolve decided transactions and finalize an open segment past its age.

        A failure is kept in :attr:`maintenance_error` and raised; the next tick
        retries (recovering the partition first when the failure discarded its
        state). While a WAL failure waits to be reported to a caller of append or
        flush, a tick does nothing.
        """
        with self._lock:
            if self._closed:
                return None
            try:
                if not self._ready(foreground=False):
                    self.maintenance_error = self._unreported_wal
                    return None
                self._publish_pending()
                self._resolve()
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
        reader treats a heartbeat whose writer no longer holds the lock as stale.
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

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"partition {self.pid} writer is closed")

    def close(self, *, finalize: bool = True) -> None:
        """Finalize committed data (unless told not to), sync and release the lock.

        A writer whose state was discarded after a failure does not finalize: its data
        is in the WAL, which the next open recovers. A WAL failure no caller was told
        of is raised once everything is released.
        """
        with self._lock:
            if self._closed:
                return
            unreported: BaseException | None = None
            try:
                if self._broken is None and self.wal.failed:
                    self._poison(self.wal.failure or WalFailedError(0, "wal writer failed"))
                unreported = self._unreported_wal
                if finalize and self._broken is None:
                    self._resolve()
                    self._finalize()
                    self.write_heartbeat()  # status must not show a sealed segment as open
            finally:
                self._closed = True
                try:
                    self.wal.close()
                finally:
                    self._flock.release()
            if unreported is not None:
                self._unreported_wal = None
                raise unreported
