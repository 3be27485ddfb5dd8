"""SubscriberRegistry: register, record outcomes, query marks; shared by processes.

The subscriber API over the ack log. The registry holds one
:class:`~.journal.Journal`, which keeps the files, locks, appends, checkpoints and the
rebuild after a failed I/O: :class:`~.journal.FileJournal` (POSIX files, §13) or
:class:`~.objects_journal.ObjectJournal` (an object root, §13.7), the one the root's
kind names (:attr:`~quiver_spark.root_kind.RootKind.journal`): the registry is handed
it and never asks what kind of root it is on. No journal imports this module.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Self

from ..config import ACK_CHECKPOINT_RECORDS, validate_name
from ..errors import ConfigError, SubscriberError, UnknownSegmentError
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore
from ..seams import NO_DELETIONS, DeletedMarks
from ..values import parse_choice
from . import log as acklog
from .journal import FileJournal, Journal, OpenReport
from .live import LiveClaim
from .reclaimed import EVENT as REGISTERED_LATE
from .reclaimed import Reclaimed, RecordedOf, deleted_counts, reclaimed_before, with_recorded
from .state import PartState, RegistryState

log = logging.getLogger(__name__)

MAX_RUN = 0xFFFF_FFFF

JournalKind = type[Journal]
"""The ack log a root keeps, as its kind names it (:mod:`quiver_spark.root_kind`): a
class of :class:`~.journal.Journal`."""


class Outcome(enum.Enum):
    """What a subscriber did with a segment. ``DROPPED`` counts as done, like ``ACK``."""

    ACK = "ack"
    NACK = "nack"
    DROPPED = "dropped"


class StartPosition(enum.Enum):
    """Where a consumer without a position of its own starts, in each partition: the
    one type for the registry, :class:`~quiver_spark.subscription.Subscription` and the
    ``startingPosition`` option (whose names are the values)."""

    EARLIEST = "earliest"
    """At the first retained (or lost) segment."""
    LATEST = "latest"
    """After everything published now."""
    ACKED = "acked"
    """At the subscriber's acknowledged mark; one not yet registered has acknowledged
    nothing, so it is registered as ``EARLIEST``."""

    @classmethod
    def parse(cls, value: StartPosition | str, option: str = "position") -> StartPosition:
        """``value`` as a member: one, or its name in any case (``" Latest "``); anything
        else is refused naming ``option`` and the allowed names."""
        if isinstance(value, StartPosition):
            return value
        names = [s.value for s in cls]
        if not isinstance(value, str):
            raise ConfigError(option, value, " | ".join(names))
        return cls(parse_choice(option, value, names))


_CODES = {
    Outcome.ACK: acklog.OUT_ACK,
    Outcome.NACK: acklog.OUT_NACK,
    Outcome.DROPPED: acklog.OUT_DROPPED,
}
Known = Callable[[str, int], bool]


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

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._mutex = journal.mutex
        self._claims: dict[tuple[int, str], set[int]] = {}
        self.recorded: RecordedOf | None = None
        """A partition's MANIFEST totals of what retention reclaimed (§11.1), set by
        the store that opens the registry: a late registration then names the rows
        and time range of what went before it (:func:`.reclaimed.with_recorded`)."""

    @classmethod
    def open(
        cls,
        root: str,
        *,
        io: FileIO = DEFAULT_IO,
        checkpoint_records: int = ACK_CHECKPOINT_RECORDS,
        salvage: bool = False,
        objects: ObjectStore | None = None,
        journal: JournalKind = FileJournal,
    ) -> Self:
        """Open the ack log of the store at ``root`` in ``journal``, the one its kind
        names (:attr:`~quiver_spark.root_kind.RootKind.journal`; an object root's
        needs ``objects``, the root's object store), and replay checkpoint + tail.

        ``salvage`` skips ack records whose CRC fails (listed in ``report.salvaged``)
        instead of raising :class:`~quiver_spark.errors.ChecksumMismatchError`.
        """
        return cls(
            journal.open(
                root, io=io, checkpoint_records=checkpoint_records, salvage=salvage, objects=objects
            )
        )

    @classmethod
    def read_only_subscribers(cls, root: str, *, io: FileIO = DEFAULT_IO) -> list[str]:
        """The subscribers the checkpoint and logs of a POSIX root register, read
        without a lock and without repairing anything (bad records skipped, a torn
        tail left out): what ``quiver fsck`` compares the subscription records with."""
        return cls(FileJournal.read_unlocked(root, io)).subscribers()

    # -- the journal's ---------------------------------------------------------------------
    @property
    def root(self) -> str:
        return self.journal.root

    @property
    def state(self) -> RegistryState:
        """The ack log's state as of the last write or :meth:`refresh` (read only)."""
        return self.journal.state

    @property
    def report(self) -> OpenReport:
        """What opening the ack log found and did."""
        return self.journal.report

    def refresh(self) -> None:
        """Read what other processes appended since the last read."""
        self.journal.refresh()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Self]:
        """Hold the ack log's exclusive lock (fresh state) across several steps.

        Retention uses it so that no subscriber registers or acks between its plan,
        the ``dropped`` records and the deletion. On an object root, where nothing
        locks between processes, it holds off this process's other threads, and each
        mutation inside is validated again at its own commit (§13.7).
        """
        with self.journal.exclusive():
            yield self

    def checkpoint(self) -> None:
        """Write a checkpoint of the ack log now (raises on failure)."""
        self.journal.checkpoint()

    def acklog_stats(self) -> dict[str, int]:
        """The ack log's depth since its checkpoint, totals and repairs."""
        return self.journal.stats()

    def close(self) -> None:
        self.journal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- subscribers ---------------------------------------------------------------------
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

    def register(
        self,
        sub: str,
        *,
        start: StartPosition | Mapping[str, int] = StartPosition.EARLIEST,
        retained: Mapping[str, Sequence[int]] | None = None,
        exist_ok: bool = False,
    ) -> Reclaimed | None:
        """Register ``sub`` durably with a start position per partition.

        ``EARLIEST`` (and ``ACKED``: a new subscriber acknowledged nothing): everything
        in ``retained`` is still to deliver (mark = first retained - 1); ``LATEST``:
        mark = last retained seq; a mapping gives explicit marks. Partitions not named
        start at mark 0 (raised to the deleted floor).

        Returns what retention reclaimed before this registration (also logged at
        WARNING, ``quiver.subscriber.registered_late``), or None: nothing was, or
        ``sub`` was registered already.
        """
        validate_name("subscriber", sub)
        retained = retained or {}
        marks: dict[str, int] = {}
        if isinstance(start, StartPosition):
            for p, seqs in retained.items():
                seqs = list(seqs)
                if start is StartPosition.LATEST:
                    marks[p] = max(seqs) if seqs else 0
                else:
                    marks[p] = min(seqs) - 1 if seqs else 0
        else:
            marks = {p: int(h) for p, h in start.items()}
        for p, h in marks.items():
            validate_name("partition", p)
            if h < 0:
                raise SubscriberError(f"start mark {h} for partition {p!r} is negative")

        def build() -> acklog.RecordEncoder | None:
            if sub in self.state.by_name:
                if exist_ok:
                    return None
                raise SubscriberError(f"subscriber {sub!r} is already registered")
            enc = self.journal.encoder()
            new: dict[str, int] = {}
            sid = self.state.next_sub_id
            enc.add_name(acklog.NS_SUBSCRIBER, sid, sub)
            for p, h in sorted(marks.items()):
                pid = self._part_id(p, enc, new)
                if h:
                    enc.add(acklog.K_START, sub=sid, part=pid, a=h)
            return enc

        if self.journal.transact(build) is None:
            return None
        log.info("quiver.subscriber.register subscriber=%s marks=%s", sub, marks)
        with self._mutex:
            late = reclaimed_before(self.state, sub, at_least=bool(self.report.salvaged))
        if late is not None and self.recorded is not None:
            late = with_recorded(late, self.recorded, self._deleted_counts_again)
        if late is not None:
            log.warning("%s %s", REGISTERED_LATE, late.line())
        return late

    def _deleted_counts_again(self) -> dict[str, int]:
        """Each partition's deleted seqs as the ack log records them now (read again)."""
        self.refresh()
        with self._mutex:
            return deleted_counts(self.state)

    def deregister(self, sub: str) -> None:
        """Remove ``sub`` durably; its pins are released at the next retention pass."""
        gone: list[int] = []

        def build() -> acklog.RecordEncoder:
            gone[:] = [self._sid(sub)]
            enc = self.journal.encoder()
            enc.add(acklog.K_DEREG, sub=gone[0])
            return enc

        self.journal.transact(build)
        with self._mutex:
            self._claims = {k: v for k, v in self._claims.items() if k[0] not in gone}
        log.info("quiver.subscriber.deregister subscriber=%s", sub)

    def deregister_idle(self, sub: str, idle: Callable[[], bool]) -> bool:
        """Deregister ``sub`` as expiry does (§13.8): one transaction whose build, on
        the newest state, finds ``sub`` still registered and ``idle()`` true (the
        caller reads there what an acknowledgement, a start or a live consumer leaves:
        the done count, the record, the lease). On an object root, where nothing locks
        the ack log between processes, an acknowledgement appended first makes the
        build run again and see it. Returns whether ``sub`` was deregistered."""
        gone: list[int] = []

        def build() -> acklog.RecordEncoder | None:
            gone.clear()
            sid = self.state.by_name.get(sub)
            if sid is None or not idle():
                return None
            gone.append(sid)
            enc = self.journal.encoder()
            enc.add(acklog.K_DEREG, sub=sid)
            return enc

        if self.journal.transact(build) is None:
            return False
        with self._mutex:
            self._claims = {k: v for k, v in self._claims.items() if k[0] not in gone}
        log.info("quiver.subscriber.deregister subscriber=%s (expired)", sub)
        return True

    def subscribers(self) -> list[str]:
        return sorted(self.state.by_name)

    def done_count(self, sub: str) -> int:
        """How many seqs ``sub`` has done (acked or dropped) over every partition: its
        mark plus the seqs done above it, per partition (§13.4). It grows with each
        acknowledgement and each drop, and is what a subscription record keeps as
        evidence of progress (§13.8). Costs one look per partition."""
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
        consumer: LiveClaim | None = None,
    ) -> None:
        """Record ``outcome`` for ``seqs`` of ``partition``; durable before it returns.

        Duplicates are idempotent (nothing is written); acks and drops are final, so a
        nack after an ack is ignored. ``known(partition, seq)`` (from the store) says
        whether a segment was ever created; a seq that is neither done nor known raises
        :class:`~quiver_spark.errors.UnknownSegmentError` and nothing is recorded.
        """
        self.record_many(sub, {partition: seqs}, outcome, known=known, consumer=consumer)

    def claim_epoch(self, sub: str) -> int:
        """The lease epoch of ``sub``'s standing consumer claim (§13.7); 0 when none."""
        self.refresh()
        sid = self.state.by_name.get(sub)
        standing = self.state.claims.get(sid) if sid is not None else None
        return standing[0] if standing is not None else 0

    def claim_consumer(self, sub: str, claim: LiveClaim) -> None:
        """Object root: ``sub``'s live consumer is ``claim`` from here on in the ack log
        (§13.7). Made before the consumer reads its position: every acknowledgement of
        an earlier consumer is either before it in the log (so the position includes
        it) or refused. No write when the latest claim is this one, or ``sub`` is not
        registered (its registration's first acknowledgement claims it)."""

        def build() -> acklog.RecordEncoder | None:
            sid = self.state.by_name.get(sub)
            if sid is None or self.state.claimed_by(sid) == claim.token:
                return None
            standing = self.state.claims.get(sid)
            if standing is not None and standing[0] > claim.epoch:
                raise claim.refused(sub)  # a consumer of a later lease claimed it
            enc = self.journal.encoder()
            enc.add(acklog.K_CLAIM, sub=sid, a=claim.token, b=claim.epoch)
            return enc

        self.journal.transact(build)

    def record_many(
        self,
        sub: str,
        seqs_by_partition: Mapping[str, Iterable[int]],
        outcome: Outcome,
        *,
        known: Known | None = None,
        consumer: LiveClaim | None = None,
        dropped: Mapping[str, Iterable[int]] | None = None,
    ) -> None:
        """:meth:`record` for several partitions in one durable write. ``consumer``: the
        live consumer recording (an object root, §13.7); refused with LeaseLostError,
        nothing recorded, unless the latest claim of ``sub``'s registration is its own
        (a later consumer claimed it, or ``sub`` was registered again since).
        ``dropped``: seqs recorded ``dropped`` in the same write (an acceptance
        horizon's, beside the batch's acknowledgements)."""
        if not isinstance(outcome, Outcome):
            raise SubscriberError(f"outcome must be an Outcome, got {outcome!r}")
        groups = [(outcome, seqs_by_partition), (Outcome.DROPPED, dropped or {})]
        wanted_by = [
            (o, {validate_name("partition", p): sorted(set(s)) for p, s in g.items()})
            for o, g in groups
        ]
        released: dict[tuple[int, str], list[int]] = {}

        def build() -> acklog.RecordEncoder | None:
            released.clear()
            sid = self._sid(sub)
            enc = self.journal.encoder()
            new: dict[str, int] = {}
            if consumer is not None and self.state.claimed_by(sid) != consumer.token:
                # another consumer claimed it later, or this registration is newer
                # than the consumer's claim (registered again meanwhile): never ours
                raise consumer.refused(sub)
            for out, wanted in wanted_by:
                for p, seqs in wanted.items():
                    pid = self.state.part_ids.get(p)
                    todo = [s for s in seqs if not self.state.is_done(sid, pid, s)]
                    for s in todo:
                        if s < 1 or (known is not None and not known(p, s)):
                            raise UnknownSegmentError(
                                f"segment {s} of partition {p!r} does not exist "
                                f"(outcome {out.value} from subscriber {sub!r})"
                            )
                    if not todo:
                        continue
                    pid = self._part_id(p, enc, new)
                    for first, count in to_runs(todo):
                        enc.add(acklog.K_OUTCOME, _CODES[out], sub=sid, part=pid, a=first, b=count)
                    released.setdefault((sid, p), []).extend(todo)
            return enc if enc.parts else None

        self.journal.transact(build)
        with self._mutex:
            for key, todo in released.items():
                claims = self._claims.get(key)
                if claims:
                    claims.difference_update(todo)

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
        """What retention recorded deleted in ``partition`` (the §13.4 ``DELETED``
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

        def build() -> acklog.RecordEncoder | None:
            dropped.clear()
            enc = self.journal.encoder()
            new: dict[str, int] = {}
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
            return enc if enc.parts else None

        self.journal.transact(build)
        return dropped

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
