"""SubscriberRegistry: register, record outcomes, query marks; shared by processes.

Files under ``<root>/subscribers/`` (ARCHITECTURE.md §8): ``LOCK`` (flock target),
``CHECKPOINT`` (framed msgpack, magic ``QCKP``) and ``ack-<gen>.log`` files
(:mod:`.log`). Every append holds an exclusive ``flock`` on ``LOCK`` for one
``write`` + ``fdatasync``; readers hold it shared while they read the new tail, so a
reader never sees a half-written record and a compactor never rotates under a writer.

A failed I/O never leaves the registry unusable: the failed write is cut back and its
records are never applied, and the next call rebuilds the state from disk (checkpoint +
logs, as :meth:`SubscriberRegistry.open` does) and continues in a new log generation, so
a log file whose write or fsync failed is never written or fsynced again
(ARCHITECTURE.md §8.5).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..config import validate_name
from ..errors import QuiverError, StoreClosedError, SubscriberError, UnknownSegmentError
from ..format import MAGIC_CHECKPOINT, SUBSCRIBERS_DIR, decode_frame, encode_frame
from ..fs import DEFAULT_IO, FileIO
from ..seams import NO_DELETIONS, DeletedMarks
from . import log as acklog
from .state import PartState, RegistryState

log = logging.getLogger(__name__)

LOCK_NAME = "LOCK"
CHECKPOINT_NAME = "CHECKPOINT"
MAX_RUN = 0xFFFF_FFFF


class Outcome(enum.Enum):
    """What a subscriber did with a segment. ``DROPPED`` counts as done, like ``ACK``."""

    ACK = "ack"
    NACK = "nack"
    DROPPED = "dropped"


class StartPosition(enum.Enum):
    """Where a new subscriber starts in each partition it is registered with."""

    EARLIEST = "earliest"
    LATEST = "latest"


_CODES = {
    Outcome.ACK: acklog.OUT_ACK,
    Outcome.NACK: acklog.OUT_NACK,
    Outcome.DROPPED: acklog.OUT_DROPPED,
}
Known = Callable[[str, int], bool]


@dataclass
class OpenReport:
    """What :meth:`SubscriberRegistry.open` found and did."""

    checkpoint_gen: int = 0
    log_files: int = 0
    records_replayed: int = 0
    torn: list[tuple[str, int, int]] = field(default_factory=list)  # path, offset, bytes cut
    salvaged: list[tuple[str, int]] = field(default_factory=list)  # path, offset skipped
    duration_s: float = 0.0


def to_runs(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``seqs`` as ``(first, count)`` runs."""
    runs: list[tuple[int, int]] = []
    for s in sorted(set(seqs)):
        if runs and runs[-1][0] + runs[-1][1] == s and runs[-1][1] < MAX_RUN:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return runs


class SubscriberRegistry:
    """Subscriber marks, gap sets and outcomes, durable in a shared ack log.

    Open with :meth:`open`. Writes (``register``, ``deregister``, ``record``) are
    durable (fdatasync) before they return and first read what other processes
    appended; reads use the state as of the last write or :meth:`refresh`.
    """

    def __init__(self, root: str, io: FileIO, checkpoint_records: int, salvage: bool) -> None:
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
        self._claims: dict[tuple[int, str], set[int]] = {}
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
    ) -> SubscriberRegistry:
        """Open (creating ``<root>/subscribers`` if needed) and replay checkpoint + tail.

        ``salvage`` skips ack records whose CRC fails (listed in ``report.salvaged``)
        instead of raising :class:`~quiver_spark.errors.ChecksumMismatchError`.
        """
        reg = cls(root, io, checkpoint_records, salvage)
        t0 = time.perf_counter()
        io.mkdir(reg.dir)
        reg._lock_fd = io.open_append(os.path.join(reg.dir, LOCK_NAME))
        try:
            with reg._locked(exclusive=True, refresh=False):
                reg._load_checkpoint()
                reg._catch_up(exclusive=True)
        except BaseException:
            reg.close()
            raise
        reg.report.records_replayed = reg._since_ckpt
        reg.report.duration_s = time.perf_counter() - t0
        log.info(
            "quiver.acklog.open dir=%s checkpoint_gen=%d records=%d torn=%d salvaged=%d ms=%.1f",
            reg.dir,
            reg._ckpt_gen,
            reg._since_ckpt,
            len(reg.report.torn),
            len(reg.report.salvaged),
            reg.report.duration_s * 1000,
        )
        return reg

    @classmethod
    def read_only_subscribers(cls, root: str, *, io: FileIO = DEFAULT_IO) -> list[str]:
        """The subscribers the checkpoint and logs register, read without a lock and
        without repairing anything (bad records skipped, a torn tail left out): what
        ``quiver fsck`` compares the subscription records with."""
        reg = cls(root, io, 1, salvage=True)
        reg._load_checkpoint()
        gens = [g for g in acklog.list_generations(io, reg.dir) if g >= reg._ckpt_gen]
        for gen in gens:
            path = os.path.join(reg.dir, acklog.log_file_name(gen))
            reg._cursor = acklog.open_cursor(io, path)
            reg._read_file(path, False, last_file=gen == gens[-1])
        return reg.subscribers()

    def close(self) -> None:
        with self._mutex:
            for fd in (self._log_fd, self._lock_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        self.io.close(fd)
            self._log_fd = self._lock_fd = None

    def __enter__(self) -> SubscriberRegistry:
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
    def exclusive(self) -> Iterator[SubscriberRegistry]:
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

    def _part_id(self, partition: str, enc: acklog.RecordEncoder, new: dict[str, int]) -> int:
        pid = self.state.part_ids.get(partition)
        if pid is None:
            pid = new.get(partition)
        if pid is None:
            pid = self.state.next_part_id + len(new)
            new[partition] = pid
            enc.add_name(acklog.NS_PARTITION, pid, partition)
        return pid

    def _sid(self, sub: str) -> int:
        sid = self.state.by_name.get(sub)
        if sid is None:
            raise SubscriberError(f"unknown subscriber {sub!r}; registered: {self.subscribers()}")
        return sid

    # -- subscribers ---------------------------------------------------------------------
    def register(
        self,
        sub: str,
        *,
        start: StartPosition | Mapping[str, int] = StartPosition.EARLIEST,
        retained: Mapping[str, Sequence[int]] | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Register ``sub`` durably with a start position per partition.

        ``EARLIEST``: everything in ``retained`` is still to deliver (mark = first
        retained - 1); ``LATEST``: mark = last retained seq; a mapping gives explicit
        marks. Partitions not named start at mark 0 (raised to the deleted floor).
        """
        validate_name("subscriber", sub)
        retained = retained or {}
        marks: dict[str, int] = {}
        if isinstance(start, StartPosition):
            for p, seqs in retained.items():
                seqs = list(seqs)
                if start is StartPosition.EARLIEST:
                    marks[p] = min(seqs) - 1 if seqs else 0
                else:
                    marks[p] = max(seqs) if seqs else 0
        else:
            marks = {p: int(h) for p, h in start.items()}
        for p, h in marks.items():
            validate_name("partition", p)
            if h < 0:
                raise SubscriberError(f"start mark {h} for partition {p!r} is negative")
        with self._locked(exclusive=True):
            if sub in self.state.by_name:
                if exist_ok:
                    return
                raise SubscriberError(f"subscriber {sub!r} is already registered")
            enc, new = self._encoder(), cast("dict[Any, Any]", {})
            sid = self.state.next_sub_id
            enc.add_name(acklog.NS_SUBSCRIBER, sid, sub)
            for p, h in sorted(marks.items()):
                pid = self._part_id(p, enc, new)
                if h:
                    enc.add(acklog.K_START, sub=sid, part=pid, a=h)
            self._append(enc)
        log.info("quiver.subscriber.register subscriber=%s marks=%s", sub, marks)

    def deregister(self, sub: str) -> None:
        """Remove ``sub`` durably; its pins are released at the next retention pass."""
        with self._locked(exclusive=True):
            sid = self._sid(sub)
            enc = self._encoder()
            enc.add(acklog.K_DEREG, sub=sid)
            self._append(enc)
            self._claims = {k: v for k, v in self._claims.items() if k[0] != sid}
        log.info("quiver.subscriber.deregister subscriber=%s", sub)

    def subscribers(self) -> list[str]:
        return sorted(self.state.by_name)

    def done_count(self, sub: str) -> int:
        """How many seqs ``sub`` has done (acked or dropped) over every partition: its
        mark plus the seqs done above it, per partition (§8.4). It grows with each
        acknowledgement and each drop, and is what a subscription record keeps as
        evidence of progress (§8.10). Costs one look per partition."""
        with self._mutex:
            sid = self._sid(sub)
            st = self.state
            total = 0
            for pid in set(st.parts) | set(st.deleted) | set(st.progress.get(sid, {})):
                ps = st.marks(sid, pid)
                if ps is not None:
                    total += ps.hwm + len(ps.gaps)
            return total

    # -- outcomes --------------------------------------------------------------------------
    def record(
        self,
        sub: str,
        partition: str,
        seqs: Iterable[int],
        outcome: Outcome,
        *,
        known: Known | None = None,
    ) -> None:
        """Record ``outcome`` for ``seqs`` of ``partition``; durable before it returns.

        Duplicates are idempotent (nothing is written); acks and drops are final, so a
        nack after an ack is ignored. ``known(partition, seq)`` (from the store) says
        whether a segment was ever created; a seq that is neither done nor known raises
        :class:`~quiver_spark.errors.UnknownSegmentError` and nothing is recorded.
        """
        self.record_many(sub, {partition: seqs}, outcome, known=known)

    def record_many(
        self,
        sub: str,
        seqs_by_partition: Mapping[str, Iterable[int]],
        outcome: Outcome,
        *,
        known: Known | None = None,
    ) -> None:
        """:meth:`record` for several partitions in one durable write."""
        if not isinstance(outcome, Outcome):
            raise SubscriberError(f"outcome must be an Outcome, got {outcome!r}")
        wanted = {
            validate_name("partition", p): sorted(set(s)) for p, s in seqs_by_partition.items()
        }
        with self._locked(exclusive=True):
            sid = self._sid(sub)
            enc, new = self._encoder(), cast("dict[Any, Any]", {})
            for p, seqs in wanted.items():
                pid = self.state.part_ids.get(p)
                todo = [s for s in seqs if not self.state.is_done(sid, pid, s)]
                for s in todo:
                    if s < 1 or (known is not None and not known(p, s)):
                        raise UnknownSegmentError(
                            f"segment {s} of partition {p!r} does not exist "
                            f"(outcome {outcome.value} from subscriber {sub!r})"
                        )
                if not todo:
                    continue
                pid = self._part_id(p, enc, new)
                for first, count in to_runs(todo):
                    enc.add(acklog.K_OUTCOME, _CODES[outcome], sub=sid, part=pid, a=first, b=count)
                claims = self._claims.get((sid, p))
                if claims:
                    claims.difference_update(todo)
            self._append(enc)

    # -- queries -------------------------------------------------------------------------
    def _view(self, sub: str, partition: str) -> PartState:
        return self.state.view(self._sid(sub), self.state.part_ids.get(partition))

    def hwm(self, sub: str, partition: str) -> int:
        """Highest seq such that every seq up to it is acked or dropped for ``sub``."""
        return self._view(sub, partition).hwm

    def gaps(self, sub: str, partition: str) -> frozenset[int]:
        """Seqs above the mark already done, waiting for the holes below them."""
        return frozenset(self._view(sub, partition).gaps)

    def nacked(self, sub: str, partition: str) -> frozenset[int]:
        ps = self._view(sub, partition)
        return frozenset(s for s in ps.nacked if not ps.is_done(s))

    def is_done(self, sub: str, partition: str, seq: int) -> bool:
        return self.state.is_done(self._sid(sub), self.state.part_ids.get(partition), seq)

    def pending(self, sub: str, partition: str, available: Sequence[int]) -> list[int]:
        """Seqs of ``available`` not done for ``sub``, ascending (nacked ones included)."""
        ps = self._view(sub, partition)
        return sorted(s for s in available if not ps.is_done(s))

    def done_by_all(self, partition: str, seq: int) -> bool:
        """True when at least one subscriber exists and every one is done with ``seq``.

        With no subscriber registered nothing is "done": steady-state retention keeps
        the data for the first subscriber (time and size-cap retention still apply).
        """
        pid = self.state.part_ids.get(partition)
        sids = list(self.state.subs)
        return bool(sids) and all(self.state.is_done(sid, pid, seq) for sid in sids)

    def undone_by(self, partition: str, seq: int) -> list[str]:
        """Subscribers that have not acked or dropped ``seq`` (sorted names)."""
        pid = self.state.part_ids.get(partition)
        return sorted(
            n for sid, n in self.state.subs.items() if not self.state.is_done(sid, pid, seq)
        )

    def deleted_marks(self, partition: str) -> DeletedMarks:
        """What retention recorded deleted in ``partition`` (the §8.4 ``DELETED``
        facts): ``above`` is the live set (read it, never change it)."""
        pid = self.state.part_ids.get(partition)
        dl = self.state.deleted.get(pid) if pid is not None else None
        return NO_DELETIONS if dl is None else DeletedMarks(dl.hwm, dl.gaps)

    def is_deleted(self, partition: str, seq: int) -> bool:
        """True when retention condemned ``seq`` (recorded before its deletion)."""
        return self.deleted_marks(partition).holds(seq)

    def max_deleted(self, partition: str) -> int:
        """Highest seq of ``partition`` retention recorded deleted (0 if none)."""
        return self.deleted_marks(partition).highest

    def done_summary(self, partition: str) -> tuple[int, set[int]]:
        """What retention counts as done in ``partition``: ``(floor, above)``, where
        every seq up to ``floor`` and each seq in ``above`` is either done by every
        subscriber (:meth:`done_by_all`) or recorded deleted (:meth:`is_deleted`).

        Costs one look at each subscriber's mark, not one per segment.
        """
        pid = self.state.part_ids.get(partition)
        d_floor, d_above = self.deleted_marks(partition)
        found = [self.state.marks(sid, pid) for sid in self.state.subs]
        marks = [v for v in found if v is not None]
        if not marks or len(marks) < len(found):  # nobody, or one with nothing done here
            return d_floor, set(d_above)
        lowest = min(marks, key=lambda v: v.hwm)
        floor = max(lowest.hwm, d_floor)
        above = {s for s in lowest.gaps if s > floor and all(v.is_done(s) for v in marks)}
        above.update(s for s in d_above if s > floor)
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        return floor, above

    # -- delivery helper (embedded use) ------------------------------------------------------
    def next_segments(
        self, sub: str, partition: str, available: Sequence[int], limit: int | None = None
    ) -> list[int]:
        """Claim and return up to ``limit`` pending seqs not already claimed in-process.

        Claims are in memory only: after a crash every unacked segment is pending
        again (at-least-once). ``record`` of any outcome releases a claim, so a nack
        makes the segment deliverable again.
        """
        with self._mutex:
            claims = self._claims.setdefault((self._sid(sub), partition), set())
            out = [s for s in self.pending(sub, partition, available) if s not in claims]
            out = out[:limit] if limit is not None else out
            claims.update(out)
            return out

    def release(self, sub: str, partition: str, seqs: Iterable[int]) -> None:
        """Drop in-memory claims without recording an outcome."""
        with self._mutex:
            self._claims.get((self._sid(sub), partition), set()).difference_update(seqs)

    # -- retention support (call inside ``exclusive()``) -----------------------------------------
    def condemn(self, deletions: Mapping[str, Sequence[int]]) -> dict[str, dict[str, list[int]]]:
        """Durably record ``dropped`` for every subscriber not done, then mark deleted.

        One write + fdatasync holds both, so ``dropped`` is on disk before the caller
        deletes a single file. Returns ``{subscriber: {partition: seqs dropped}}``.
        """
        dropped: dict[str, dict[str, list[int]]] = {}
        with self._locked(exclusive=True):
            enc, new = self._encoder(), cast("dict[Any, Any]", {})
            for p, seqs in sorted(deletions.items()):
                seqs = sorted(set(seqs))
                if not seqs:
                    continue
                pid = self._part_id(p, enc, new)
                for sid, name in sorted(self.state.subs.items()):
                    todo = [s for s in seqs if not self.state.is_done(sid, pid, s)]
                    if todo:
                        dropped.setdefault(name, {})[p] = todo
                        for first, count in to_runs(todo):
                            enc.add(
                                acklog.K_OUTCOME,
                                acklog.OUT_DROPPED,
                                sub=sid,
                                part=pid,
                                a=first,
                                b=count,
                            )
                for first, count in to_runs(seqs):
                    enc.add(acklog.K_DELETED, part=pid, a=first, b=count)
            self._append(enc)
        return dropped

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

    def marks_table(self) -> list[tuple[str, str, int, set[int]]]:
        """``(subscriber, partition, hwm, gaps)`` for every subscriber and every
        partition the ack log names, sorted; the gap sets are not copied (read only)."""
        with self._mutex:
            st = self.state
            no_gaps: set[int] = set()
            parts = sorted(st.parts.items(), key=lambda kv: kv[1])
            out = []
            for sid, name in sorted(st.subs.items(), key=lambda kv: kv[1]):
                for pid, pname in parts:
                    ps = st.marks(sid, pid)
                    out.append((name, pname, ps.hwm, ps.gaps) if ps else (name, pname, 0, no_gaps))
            return out

    def stats(self) -> dict[str, Any]:
        """Ack-log depth and per-subscriber marks, gap sizes and nacks."""
        with self._mutex:
            subs: dict[str, Any] = {}
            for sid, name in sorted(self.state.subs.items(), key=lambda kv: kv[1]):
                per: dict[str, Any] = {}
                for pid, pname in sorted(self.state.parts.items(), key=lambda kv: kv[1]):
                    ps = self.state.view(sid, pid)
                    per[pname] = {
                        "hwm": ps.hwm,
                        "gap_size": len(ps.gaps),
                        "nacked": sum(1 for s in ps.nacked if not ps.is_done(s)),
                    }
                subs[name] = per
            return {
                "acklog": self.acklog_stats(),
                "subscribers": subs,
                "deleted_floor": {
                    self.state.parts.get(pid, f"#{pid}"): ps.hwm
                    for pid, ps in self.state.deleted.items()
                },
            }
