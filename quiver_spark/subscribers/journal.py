"""The ack log's journal: what the registry needs of it, and the POSIX files
(ARCHITECTURE.md §13; the object root's journal is :mod:`.objects_journal`, §13.7).

:class:`~.registry.SubscriberRegistry` holds one :class:`Journal` and asks it for the
state the ack log describes and for transactions that append one encoded record batch;
the journal does the locking, reading what others appended, durable appends and
checkpoints. The root's kind names the journal it keeps
(:attr:`~quiver_spark.root_kind.RootKind.journal`).

The POSIX journal, :class:`FileJournal`, keeps files under ``<root>/subscribers/``:
``LOCK`` (flock target), ``CHECKPOINT`` (framed msgpack, magic ``QCKP``) and
``ack-<gen>.log`` files (:mod:`.log`). Every append holds an exclusive ``flock`` on
``LOCK`` for one ``write`` + ``fdatasync``; readers hold it shared while they read the
new tail, so a reader never sees a half-written record and a compactor never rotates
under a writer.

A failed I/O never leaves the journal unusable: the failed write is cut back and its
records are never applied, and the next call rebuilds the state from disk (checkpoint +
logs, as :meth:`FileJournal.open` does) and continues in a new log generation, so
a log file whose write or fsync failed is never written or fsynced again (§13.5).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

from .. import layout
from ..config import ACK_CHECKPOINT_RECORDS
from ..errors import QuiverError, StoreClosedError
from ..format import MAGIC_CHECKPOINT, decode_frame, encode_frame
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore
from . import log as acklog
from .state import RegistryState

log = logging.getLogger(__name__)

Build = Callable[[], acklog.RecordEncoder | None]
"""A registry mutation's body: it reads the journal's state and returns the records to
append (from :meth:`Journal.encoder`), or None when there is nothing to write."""


@dataclass
class OpenReport:
    """What :meth:`SubscriberRegistry.open` found and did."""

    checkpoint_gen: int = 0
    log_files: int = 0
    records_replayed: int = 0
    torn: list[tuple[str, int, int]] = field(default_factory=list)  # path, offset, bytes cut
    salvaged: list[tuple[str, int]] = field(default_factory=list)  # path, offset skipped
    duration_s: float = 0.0


class Journal(Protocol):
    """What :class:`~.registry.SubscriberRegistry` needs of an ack log."""

    locks_processes: ClassVar[bool]
    """True when a transaction holds a lock that excludes other processes (POSIX's
    ``flock``); False on an object root, where nothing locks between processes: each
    transaction is validated again at its own commit, and a live consumer holds a lease
    whose claim its acknowledgements carry (§8.2, §13.7)."""
    stored_as: ClassVar[str]
    """How the ack log is stored, for what checks it (``quiver fsck``): ``"acklog-files"``,
    generations of ack-log files and a CHECKPOINT (§13.5); ``"acklog-deltas"``, a
    CHECKPOINT and numbered delta objects (§13.7)."""
    root: str
    dir: str
    """Where the ack log is, as messages name it."""

    @classmethod
    def open(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = ACK_CHECKPOINT_RECORDS,
        salvage: bool = False,
        objects: ObjectStore | None = None,
    ) -> Self:
        """Open (creating if need be) the ack log of the store at ``root`` and replay
        its checkpoint and tail."""
        ...

    @classmethod
    def open_existing(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = ACK_CHECKPOINT_RECORDS,
        salvage: bool = False,
        objects: ObjectStore | None = None,
    ) -> Self | None:
        """:meth:`open`, or None when the store at ``root`` has no ack log."""
        ...

    report: OpenReport
    mutex: threading.RLock
    """Held by the journal while it changes ``state``; a reader holds it for a
    consistent look at several parts of it."""

    @property
    def state(self) -> RegistryState:
        """The state as of the last transaction or :meth:`refresh` (read it, never
        change it)."""
        ...

    def transact(self, build: Build) -> acklog.RecordEncoder | None:
        """One registry mutation: ``build()`` validates against the current state and
        returns the records to append (from :meth:`encoder`), or None when there is
        nothing to write; when this returns they are durable and applied.

        ``build`` may run more than once (on a fresher state, when another append took
        its place on an object root, §13.7), so it only reads the state and fills the
        encoder: anything it reports goes through variables it sets afresh on each
        run."""
        ...

    def encoder(self) -> acklog.RecordEncoder:
        """The encoder of the records ``build`` returns (only inside :meth:`transact`)."""
        ...

    def exclusive(self) -> AbstractContextManager[object]:
        """A fresh state no transaction of another caller changes meanwhile (on an
        object root: of this process; each transaction inside is validated again)."""
        ...

    def refresh(self) -> None:
        """Read what other processes appended since the last read."""
        ...

    def checkpoint(self) -> None:
        """Write a checkpoint of the state (raises on failure)."""
        ...

    def stats(self) -> dict[str, int]:
        """The ack log's depth since its checkpoint, totals and repairs."""
        ...

    def close(self) -> None: ...


@dataclass
class Replayed:
    """The state a journal read and the counts its figures report, replaced whole when
    the journal reads its checkpoint again."""

    state: RegistryState = field(default_factory=RegistryState)
    checkpoint_gen: int = 0
    """The log generation (POSIX) or delta (object root) the checkpoint covers."""
    since_checkpoint: int = 0
    """Records applied above the checkpoint."""
    records_total: int = 0

    @classmethod
    def from_checkpoint(cls, name: str, body: dict[str, Any] | None) -> Replayed:
        """What the checkpoint ``body`` (read from ``name``; None: there is none) holds."""
        if body is None:
            return cls()
        return cls(
            RegistryState.from_body(name, body),
            int(body.get("log_gen", 0)),
            0,
            int(body.get("records_total", 0)),
        )

    def apply(self, facts: acklog.Facts) -> None:
        self.state.apply(facts)
        self.since_checkpoint += facts.records
        self.records_total += facts.records

    def figures(self, current_gen: int, torn_bytes_cut: int, salvaged: int) -> dict[str, int]:
        """The figures :meth:`Journal.stats` reports for every kind of ack log."""
        return {
            "records_since_checkpoint": self.since_checkpoint,
            "bytes_since_checkpoint": self.since_checkpoint * acklog.RECORD_SIZE,
            "records_total": self.records_total,
            "checkpoint_gen": self.checkpoint_gen,
            "current_gen": current_gen,
            "torn_bytes_cut": torn_bytes_cut,
            "salvaged_records": salvaged,
            "orphan_records": self.state.orphans,
        }


def read_at_open(journal: Journal, read: Callable[[], Replayed], detail: Callable[[], str]) -> None:
    """Open a new ``journal``: ``read()`` replays its checkpoint and tail and returns
    what it read; ``detail()`` is what the open log line adds for its kind of ack log.
    A failed read closes the journal."""
    t0 = time.perf_counter()
    try:
        replayed = read()
    except BaseException:
        journal.close()
        raise
    journal.report.records_replayed = replayed.since_checkpoint
    journal.report.duration_s = time.perf_counter() - t0
    log.info(
        "quiver.acklog.open dir=%s checkpoint_gen=%d records=%d %s salvaged=%d ms=%.1f",
        journal.dir,
        replayed.checkpoint_gen,
        replayed.since_checkpoint,
        detail(),
        len(journal.report.salvaged),
        journal.report.duration_s * 1000,
    )


def has_registry(root: str) -> bool:
    """True once the store at ``root`` has a ``subscribers/`` directory (§13): before
    any subscriber was registered or any segment recorded deleted, it has none."""
    return os.path.isdir(os.path.join(root, layout.subscribers_dir()))


class FileJournal:
    """One process's handle on a POSIX root's shared ack log and the state it describes.

    Open with :meth:`open`; writes go through :meth:`transact` under :meth:`_locked`
    (exclusive); reads use the state as of the last write or :meth:`refresh`.
    """

    locks_processes: ClassVar[bool] = True
    stored_as: ClassVar[str] = "acklog-files"

    def __init__(self, root: str, io: FileIO, checkpoint_records: int, salvage: bool) -> None:
        self.root = root
        self.dir = os.path.join(root, layout.subscribers_dir())
        self.io = io
        self.checkpoint_records = max(1, int(checkpoint_records))
        self.salvage = salvage
        self.report = OpenReport()
        self.replayed = Replayed()
        self.mutex = threading.RLock()
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._log_fd: int | None = None
        self._log_fd_gen = -1
        self._cursor: acklog.Cursor | None = None
        self._stale: BaseException | None = None  # set by a failed I/O: rebuild first
        self._lock_exclusive = False
        self.torn_cut_bytes = 0
        self.salvaged_records = 0

    @property
    def state(self) -> RegistryState:
        return self.replayed.state

    # -- lifecycle ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = ACK_CHECKPOINT_RECORDS,
        salvage: bool = False,
        objects: ObjectStore | None = None,
    ) -> Self:
        """Open the ack log under ``<root>/subscribers`` (created if needed) and replay
        checkpoint + tail under an exclusive lock (``objects`` is not used: the files
        are POSIX).

        ``salvage`` skips ack records whose CRC fails (listed in ``report.salvaged``)
        instead of raising :class:`~quiver_spark.errors.ChecksumMismatchError`.
        """
        journal = cls(root, io, checkpoint_records, salvage)
        read_at_open(journal, journal._replay, lambda: f"torn={len(journal.report.torn)}")
        return journal

    @classmethod
    def open_existing(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = ACK_CHECKPOINT_RECORDS,
        salvage: bool = False,
        objects: ObjectStore | None = None,
    ) -> Self | None:
        """:meth:`open`, or None without creating anything when the root has no
        ``subscribers/`` directory."""
        if not has_registry(root):
            return None
        return cls.open(root, io=io, checkpoint_records=checkpoint_records, salvage=salvage)

    @classmethod
    def read_unlocked(cls, root: str, io: FileIO) -> Self:
        """The checkpoint and logs read without a lock and without repairing anything
        (bad records skipped, a torn tail left out): what ``quiver fsck`` compares the
        subscription records with. Nothing is opened: only ``state`` is of use."""
        journal = cls(root, io, 1, salvage=True)
        journal._load_checkpoint()
        start = journal.replayed.checkpoint_gen
        gens = [g for g in acklog.list_generations(io, journal.dir) if g >= start]
        for gen in gens:
            path = os.path.join(journal.dir, acklog.log_file_name(gen))
            journal._cursor = acklog.open_cursor(io, path)
            journal._read_file(path, False, last_file=gen == gens[-1])
        return journal

    def _replay(self) -> Replayed:
        self.io.mkdir(self.dir)
        self._lock_fd = self.io.open_append(os.path.join(self.root, layout.registry_lock()))
        with self._locked(exclusive=True, refresh=False):
            self._load_checkpoint()
            self._catch_up(exclusive=True)
        return self.replayed

    def close(self) -> None:
        with self.mutex:
            for fd in (self._log_fd, self._lock_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        self.io.close(fd)
            self._log_fd = self._lock_fd = None

    # -- locking -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool, refresh: bool = True) -> Iterator[None]:
        with self.mutex:
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
            path = os.path.join(self.root, layout.registry_lock())
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
        saved = (self.replayed, self._cursor)
        try:
            self._load_checkpoint()
            self._catch_up(exclusive=True)
            gens = acklog.list_generations(self.io, self.dir)
            gen = max([self.replayed.checkpoint_gen, *gens]) + 1
            acklog.create_log(self.io, self.dir, gen)
            self._catch_up(exclusive=True)  # onto the new, empty generation
        except BaseException:
            self.replayed, self._cursor = saved
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
    def exclusive(self) -> Iterator[None]:
        """Hold the ack log's exclusive lock (fresh state) across several steps.

        Retention uses it so that no subscriber registers or acks between its plan,
        the ``dropped`` records and the deletion.
        """
        with self._locked(exclusive=True):
            yield

    # -- reading -----------------------------------------------------------------------
    def _load_checkpoint(self) -> None:
        path = os.path.join(self.root, layout.registry_checkpoint())
        body = None
        if self.io.exists(path):
            body = decode_frame(path, MAGIC_CHECKPOINT, self.io.read_file(path))
        self.replayed = Replayed.from_checkpoint(path, body)
        self._cursor = None
        self.report.checkpoint_gen = self.replayed.checkpoint_gen

    def _catch_up(self, *, exclusive: bool) -> None:
        """Read every record appended since the last read (caller holds the lock)."""
        gens = acklog.list_generations(self.io, self.dir)
        if self._cursor is not None and self._cursor.gen not in gens:
            self._load_checkpoint()  # our file was compacted away: restart from there
        ckpt_gen = self.replayed.checkpoint_gen
        live = [g for g in gens if g >= ckpt_gen]
        if not live:
            if not exclusive:
                return
            gen = max([ckpt_gen, *gens, 0]) + 1
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
            self.replayed.apply(acklog.decode_records(tail.data))
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
    def transact(self, build: Build) -> acklog.RecordEncoder | None:
        """:meth:`Journal.transact` under ``LOCK_EX`` after reading the new tail, so
        ``build`` runs once on a state nobody else can change before the append (§13.5)."""
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
        self.replayed.apply(acklog.decode_records(data))
        if self.replayed.since_checkpoint >= self.checkpoint_records:
            try:
                self._checkpoint_locked()
            except (OSError, QuiverError) as e:  # the append is durable: do not fail it
                self._stale = e
                log.error(
                    "quiver.acklog.checkpoint_failed dir=%s error=%s (retried after a rebuild)",
                    self.dir,
                    e,
                )

    def encoder(self) -> acklog.RecordEncoder:
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
        body = self.state.to_body(new_gen, self.replayed.records_total)
        path = os.path.join(self.root, layout.registry_checkpoint())
        self.io.atomic_write(path, encode_frame(MAGIC_CHECKPOINT, body))
        old = [g for g in acklog.list_generations(self.io, self.dir) if g < new_gen]
        self.io.durable_unlink([os.path.join(self.dir, acklog.log_file_name(g)) for g in old])
        log.info(
            "quiver.acklog.checkpoint gen=%d records=%d removed_files=%d",
            new_gen,
            self.replayed.since_checkpoint,
            len(old),
        )
        self.replayed.checkpoint_gen = new_gen
        self.replayed.since_checkpoint = 0
        self._cursor = acklog.open_cursor(
            self.io, os.path.join(self.dir, acklog.log_file_name(new_gen))
        )

    # -- stats ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        return self.replayed.figures(
            self._cursor.gen if self._cursor else 0, self.torn_cut_bytes, self.salvaged_records
        )
