"""The ack log as shared files: locks, reading what others appended, durable appends,
checkpoints, and the rebuild after a failed I/O (ARCHITECTURE.md §8).

Files under ``<root>/subscribers/``: ``LOCK`` (flock target), ``CHECKPOINT`` (framed
msgpack, magic ``QCKP``) and ``ack-<gen>.log`` files (:mod:`.log`). Every append holds
an exclusive ``flock`` on ``LOCK`` for one ``write`` + ``fdatasync``; readers hold it
shared while they read the new tail, so a reader never sees a half-written record and
a compactor never rotates under a writer.

A failed I/O never leaves the journal unusable: the failed write is cut back and its
records are never applied, and the next call rebuilds the state from disk (checkpoint +
logs, as :meth:`AckLogJournal.open` does) and continues in a new log generation, so
a log file whose write or fsync failed is never written or fsynced again (§8.5).

:class:`AckLogJournal` keeps the :class:`~.state.RegistryState` the files describe;
:class:`~.registry.SubscriberRegistry` is the subscriber API over it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Self

from ..errors import QuiverError, StoreClosedError
from ..format import MAGIC_CHECKPOINT, SUBSCRIBERS_DIR, decode_frame, encode_frame
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore
from . import log as acklog
from .state import RegistryState

log = logging.getLogger(__name__)

LOCK_NAME = "LOCK"
CHECKPOINT_NAME = "CHECKPOINT"


@dataclass
class OpenReport:
    """What :meth:`SubscriberRegistry.open` found and did."""

    checkpoint_gen: int = 0
    log_files: int = 0
    records_replayed: int = 0
    torn: list[tuple[str, int, int]] = field(default_factory=list)  # path, offset, bytes cut
    salvaged: list[tuple[str, int]] = field(default_factory=list)  # path, offset skipped
    duration_s: float = 0.0


class AckLogJournal:
    """One process's handle on the shared ack log and the state it describes.

    Open with :meth:`open`; writes go through :meth:`_append` under :meth:`_locked`
    (exclusive); reads use the state as of the last write or :meth:`refresh`.
    """

    def __init__(
        self,
        root: str,
        io: FileIO,
        checkpoint_records: int,
        salvage: bool,
        objects: ObjectStore | None = None,
    ) -> None:
        self.root = root
        self.dir = os.path.join(root, SUBSCRIBERS_DIR)
        self.io = io
        self.checkpoint_records = max(1, int(checkpoint_records))
        self.salvage = salvage
        self.report = OpenReport()
        self.state = RegistryState()
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._log_fd: int | None = None
        self._log_fd_gen = -1
        self._cursor: acklog.Cursor | None = None
        self._ckpt_gen = 0
        self._since_ckpt = 0
        self._records_total = 0
        self._stale: BaseException | None = None  # set by a failed I/O: rebuild first
        self._lock_exclusive = False
        self.torn_cut_bytes = 0
        self.salvaged_records = 0

    # -- lifecycle ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = 100_000,
        salvage: bool = False,
        objects: ObjectStore | None = None,
    ) -> Self:
        """Open the ack log of the store at ``root`` and replay checkpoint + tail
        (:meth:`_replay`), as :meth:`_implementation` picks for ``objects`` (the root's
        object store; None is POSIX).

        ``salvage`` skips ack records whose CRC fails (listed in ``report.salvaged``)
        instead of raising :class:`~quiver_spark.errors.ChecksumMismatchError`.
        """
        reg = cls._implementation(objects)(root, io, checkpoint_records, salvage, objects)
        t0 = time.perf_counter()
        try:
            reg._replay()
        except BaseException:
            reg.close()
            raise
        reg.report.records_replayed = reg._since_ckpt
        reg.report.duration_s = time.perf_counter() - t0
        log.info(
            "quiver.acklog.open dir=%s checkpoint_gen=%d records=%d %s salvaged=%d ms=%.1f",
            reg.dir,
            reg._ckpt_gen,
            reg._since_ckpt,
            reg._replay_detail(),
            len(reg.report.salvaged),
            reg.report.duration_s * 1000,
        )
        return reg

    @classmethod
    def _implementation(cls, objects: ObjectStore | None) -> type[Self]:
        """The class :meth:`open` opens for the root's object store (this one)."""
        return cls

    def _replay(self) -> None:
        """Create ``<root>/subscribers`` if needed and replay checkpoint + tail under an
        exclusive lock (the files are POSIX: ``objects`` is not used)."""
        self.io.mkdir(self.dir)
        self._lock_fd = self.io.open_append(os.path.join(self.dir, LOCK_NAME))
        with self._locked(exclusive=True, refresh=False):
            self._load_checkpoint()
            self._catch_up(exclusive=True)

    def _replay_detail(self) -> str:
        """What the open log line adds for this kind of ack log."""
        return f"torn={len(self.report.torn)}"

    def close(self) -> None:
        with self._mutex:
            for fd in (self._log_fd, self._lock_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        self.io.close(fd)
            self._log_fd = self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- locking -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool, refresh: bool = True) -> Iterator[None]:
        with self._mutex:
            if self._lock_fd is None:
                raise StoreClosedError(f"subscriber registry {self.dir} is closed")
            if self._lock_depth:
                if self._stale is not None and self._lock_exclusive:
                    self._rebuild_locked()
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            # a rebuild after a failure reads (and may cut, rotate) under LOCK_EX
            exclusive = exclusive or self._stale is not None
            path = os.path.join(self.dir, LOCK_NAME)
            self.io.before("flock", path)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            self._lock_depth = 1
            self._lock_exclusive = exclusive
            try:
                if self._stale is not None:
                    self._rebuild_locked()
                elif refresh:
                    try:
                        self._catch_up(exclusive=exclusive)
                    except BaseException as e:
                        self._stale = e
                        raise
                yield
            finally:
                self._lock_depth = 0
                self._lock_exclusive = False
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _rebuild_locked(self) -> None:
        """After a failed I/O: discard the in-memory state, rebuild it from disk as
        :meth:`open` does, and continue in a new log generation (LOCK_EX held).

        Raises (and stays to be rebuilt by the next call) while the disk still fails.
        """
        cause = self._stale
        self._close_log_fd()
        # a rebuild that fails midway leaves the last consistent state for readers
        saved = (self.state, self._cursor, self._ckpt_gen, self._since_ckpt, self._records_total)
        try:
            self._load_checkpoint()
            self._catch_up(exclusive=True)
            gen = max([self._ckpt_gen, *acklog.list_generations(self.io, self.dir)]) + 1
            acklog.create_log(self.io, self.dir, gen)
            self._catch_up(exclusive=True)  # onto the new, empty generation
        except BaseException:
            self.state, self._cursor, self._ckpt_gen, self._since_ckpt, self._records_total = saved
            raise
        self._stale = None
        log.warning(
            "quiver.acklog.rebuilt dir=%s gen=%d after=%s (the failed file is not written again)",
            self.dir,
            gen,
            cause,
        )

    def _close_log_fd(self) -> None:
        if self._log_fd is not None:
            with contextlib.suppress(OSError):
                self.io.close(self._log_fd)
            self._log_fd = None
            self._log_fd_gen = -1

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Self]:
        """Hold the registry's exclusive lock (fresh state) across several steps.

        Retention uses it so that no subscriber registers or acks between its plan,
        the ``dropped`` records and the deletion.
        """
        with self._locked(exclusive=True):
            yield self

    # -- reading -----------------------------------------------------------------------
    def _load_checkpoint(self) -> None:
        path = os.path.join(self.dir, CHECKPOINT_NAME)
        if not self.io.exists(path):
            self.state, self._ckpt_gen, self._records_total = RegistryState(), 0, 0
        else:
            body = decode_frame(path, MAGIC_CHECKPOINT, self.io.read_file(path))
            self.state = RegistryState.from_body(path, body)
            self._ckpt_gen = int(body.get("log_gen", 0))
            self._records_total = int(body.get("records_total", 0))
        self._cursor = None
        self._since_ckpt = 0
        self.report.checkpoint_gen = self._ckpt_gen

    def _catch_up(self, *, exclusive: bool) -> None:
        """Read every record appended since the last read (caller holds the lock)."""
        gens = acklog.list_generations(self.io, self.dir)
        if self._cursor is not None and self._cursor.gen not in gens:
            self._load_checkpoint()  # our file was compacted away: restart from there
        live = [g for g in gens if g >= self._ckpt_gen]
        if not live:
            if not exclusive:
                return
            gen = max([self._ckpt_gen, *gens, 0]) + 1
            acklog.create_log(self.io, self.dir, gen)
            live = [gen]
        for gen in live:
            if self._cursor is not None and gen < self._cursor.gen:
                continue
            path = os.path.join(self.dir, acklog.log_file_name(gen))
            if self._cursor is None or gen != self._cursor.gen:
                self._cursor = acklog.open_cursor(self.io, path)
                self.report.log_files += 1
            self._read_file(path, exclusive, last_file=gen == live[-1])

    def _read_file(self, path: str, exclusive: bool, *, last_file: bool) -> None:
        assert self._cursor is not None
        tail = acklog.read_tail(
            self.io, path, self._cursor, salvage=self.salvage, last_file=last_file
        )
        self._cursor = tail.cursor
        if tail.skipped:
            self.salvaged_records += len(tail.skipped)
            self.report.salvaged.extend((path, off) for off in tail.skipped)
        if tail.data:
            facts = acklog.decode_records(tail.data)
            self.state.apply(facts)
            self._since_ckpt += facts.records
            self._records_total += facts.records
        if tail.torn_bytes and exclusive and tail.torn_offset is not None:
            log.warning(
                "quiver.acklog.torn_tail path=%s offset=%d bytes=%d",
                path,
                tail.torn_offset,
                tail.torn_bytes,
            )
            self.io.truncate(path, tail.torn_offset)
            fd = self.io.open_append(path)
            try:
                self.io.fsync(fd)
            finally:
                self.io.close(fd)
            self.report.torn.append((path, tail.torn_offset, tail.torn_bytes))
            self.torn_cut_bytes += tail.torn_bytes

    def refresh(self) -> None:
        """Read what other processes appended since the last read (only the new tail)."""
        with self._locked(exclusive=False):
            pass

    # -- writing -----------------------------------------------------------------------
    def _transact(
        self, build: Callable[[], acklog.RecordEncoder | None]
    ) -> acklog.RecordEncoder | None:
        """One registry mutation: ``build()`` validates against the current state and
        returns the records to append (from :meth:`_encoder`), or None when there is
        nothing to write; when this returns they are durable and applied.

        Here: under ``LOCK_EX`` after reading the new tail, so ``build`` runs once on
        a state nobody else can change before the append (§8.5). The object journal
        runs ``build`` again on a fresher state when another append took its place
        (§12.5), so ``build`` only reads the state and fills the encoder: anything it
        reports goes through variables it sets afresh on each run.
        """
        with self._locked(exclusive=True):
            enc = build()
            if enc is not None:
                self._append(enc)
            return enc

    def _append(self, enc: acklog.RecordEncoder) -> None:
        """Write ``enc``'s records in one write + fdatasync, then apply them (EX held)."""
        data = enc.data()
        if not data:
            return
        cur = self._cursor
        assert cur is not None and self._lock_depth
        path = os.path.join(self.dir, acklog.log_file_name(cur.gen))
        try:
            if self._log_fd is None or self._log_fd_gen != cur.gen:
                self._close_log_fd()
                self._log_fd = self.io.open_append(path)
                self._log_fd_gen = cur.gen
            self.io.write(self._log_fd, data)
            self.io.fdatasync(self._log_fd)
        except OSError as e:
            # nothing of this call is applied; the next call rebuilds from disk and
            # writes to a new generation (this file's fsync state is unknown now)
            self._stale = e
            self._close_log_fd()
            with contextlib.suppress(OSError):
                self.io.truncate(path, cur.offset)
            log.error("quiver.acklog.write_failed path=%s offset=%d error=%s", path, cur.offset, e)
            raise
        self._cursor = acklog.Cursor(cur.gen, cur.offset + len(data), enc.running)
        facts = acklog.decode_records(data)
        self.state.apply(facts)
        self._since_ckpt += facts.records
        self._records_total += facts.records
        if self._since_ckpt >= self.checkpoint_records:
            try:
                self._checkpoint_locked()
            except (OSError, QuiverError) as e:  # the append is durable: do not fail it
                self._stale = e
                log.error(
                    "quiver.acklog.checkpoint_failed dir=%s error=%s (retried after a rebuild)",
                    self.dir,
                    e,
                )

    def _encoder(self) -> acklog.RecordEncoder:
        assert self._cursor is not None
        return acklog.RecordEncoder(self._cursor.running)

    # -- checkpoint ----------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write a checkpoint covering every log file, rotate, remove the covered files."""
        with self._locked(exclusive=True):
            try:
                self._checkpoint_locked()
            except BaseException as e:
                self._stale = e
                raise

    def _checkpoint_locked(self) -> None:
        assert self._cursor is not None
        new_gen = self._cursor.gen + 1
        acklog.create_log(self.io, self.dir, new_gen)
        body = self.state.to_body(new_gen, self._records_total)
        path = os.path.join(self.dir, CHECKPOINT_NAME)
        self.io.atomic_write(path, encode_frame(MAGIC_CHECKPOINT, body))
        old = [g for g in acklog.list_generations(self.io, self.dir) if g < new_gen]
        self.io.durable_unlink([os.path.join(self.dir, acklog.log_file_name(g)) for g in old])
        log.info(
            "quiver.acklog.checkpoint gen=%d records=%d removed_files=%d",
            new_gen,
            self._since_ckpt,
            len(old),
        )
        self._ckpt_gen = new_gen
        self._since_ckpt = 0
        self._cursor = acklog.open_cursor(
            self.io, os.path.join(self.dir, acklog.log_file_name(new_gen))
        )

    # -- stats ---------------------------------------------------------------------------------
    def acklog_stats(self) -> dict[str, int]:
        """The ack log's depth since its checkpoint, totals and repairs."""
        return {
            "records_since_checkpoint": self._since_ckpt,
            "bytes_since_checkpoint": self._since_ckpt * acklog.RECORD_SIZE,
            "records_total": self._records_total,
            "checkpoint_gen": self._ckpt_gen,
            "current_gen": self._cursor.gen if self._cursor else 0,
            "torn_bytes_cut": self.torn_cut_bytes,
            "salvaged_records": self.salvaged_records,
            "orphan_records": self.state.orphans,
        }
