"""The ack log on an object store: one object per registry append (ARCHITECTURE.md §13.7).

Keys under the root::

    subscribers/CHECKPOINT               §13.5 body (+ ``tokens``), replaced If-Match
    subscribers/log/<n:020d>.ack         delta n: a complete §13.2/§13.3 ack-log file,
                                         generation n, created only if absent

There is no lock. A mutation (:meth:`ObjectJournal.transact`) reads what others
appended (one LIST after the cursor, one GET per new delta), runs ``build`` on that
state and creates delta ``head + 1``; when another append took the number
(``ObjectExists``) it reads again and runs ``build`` again, so every decision is
validated against every fact committed before it (one create = one commit point).
A create whose response was lost is resolved by reading back: each delta carries a
random token in its header, and a catch-up that finds the token at ``n`` knows the
call committed. Facts commute (§13.4), so the state is the replay of CHECKPOINT plus the
deltas above its ``log_gen``, whatever process wrote them.

Deltas at or below an older checkpoint's ``log_gen`` are deleted once this process has
known that checkpoint for :attr:`ObjectJournal.horizon_s` of its monotonic clock.
An appender whose head-read-to-create-returned interval reached half the horizon (its
number could have been deleted and re-created by it) checks CHECKPOINT before it
reports success; a reader idle that long checks CHECKPOINT before it reads on from
its cursor. So a delta created below a checkpoint that does not hold it is never
counted by anyone, and its appender retries above.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Self

from .. import layout
from ..config import ACK_CHECKPOINT_RECORDS
from ..control import cas
from ..control.clock import elapsed
from ..errors import (
    CorruptionError,
    ObjectConflict,
    ObjectExists,
    OutcomeUnknownError,
    PreconditionFailed,
    QuiverError,
    RequestRejected,
    RetriesExhausted,
    StoreClosedError,
)
from ..format import MAGIC_CHECKPOINT, checksum, decode_frame, encode_frame
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore, Stored
from . import log as acklog
from .journal import Build, OpenReport, Replayed, read_at_open
from .state import RegistryState

log = logging.getLogger(__name__)

CHECKPOINT_KEY = layout.registry_checkpoint()
DELTA_PREFIX = layout.ack_deltas_prefix()

CHECKPOINT_DELTAS = 32
"""A checkpoint every K deltas: an open reads CHECKPOINT, one LIST and at most ~K deltas
(2K when a checkpointer failed), i.e. under a second of sequential GETs at S3's
latencies, while the checkpoint (a body that grows with subscribers x partitions) is
rewritten once per K appends, not per append."""
HORIZON_S = 600.0
"""How long a checkpoint must have been known before the deltas it covers are deleted."""
TOKEN_WINDOW = 1024
"""A checkpoint keeps the tokens of the deltas above ``log_gen - TOKEN_WINDOW``."""
UNKNOWN_ATTEMPTS = 3


def delta_key(n: int) -> str:
    return layout.ack_delta(n)


def parse_delta(key: str) -> int | None:
    return layout.parse_ack_delta(key)


class ObjectJournal:
    """One process's handle on an object root's ack log and the state it describes
    (the :class:`~.journal.Journal` of an object root)."""

    locks_processes: ClassVar[bool] = False
    stored_as: ClassVar[str] = "acklog-deltas"

    def __init__(
        self, root: str, objects: ObjectStore, checkpoint_records: int, salvage: bool
    ) -> None:
        self.root = root
        self.objects = objects
        self.dir = objects.display(layout.subscribers_dir())
        self.checkpoint_records = max(1, int(checkpoint_records))
        self.salvage = salvage
        self.report = OpenReport()
        self.replayed = Replayed()
        self.mutex = threading.RLock()
        self.salvaged_records = 0
        self.checkpoint_deltas = CHECKPOINT_DELTAS
        self.horizon_s = HORIZON_S
        self.clock: Callable[[], float] = elapsed  # counts a suspend (§13.7)
        self.sleep: Callable[[float], None] = time.sleep
        self.maintenance_error: BaseException | None = None
        self._head = 0  # highest delta applied to ``state``
        self._listed_at: float | None = None  # clock() before the listing that found the head
        self._ckpt_known: tuple[int, str] | None = None  # newest CHECKPOINT seen: gen, version
        self._tokens: dict[int, int] = {}  # delta -> token, for the last TOKEN_WINDOW
        self._seen_ckpts: list[tuple[int, float]] = []  # (log_gen, first known at)
        self._deleted_upto = 0
        self._pending: tuple[int, int] | None = None  # (n, token) while build runs
        self._closed = False

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
        """Read CHECKPOINT, list the deltas above it and replay them (creates nothing;
        ``io`` is not used: everything is in ``objects``, the root's object store).

        Cost: 1 GET + 1 LIST + one GET per delta above the checkpoint (fewer than
        about ``2 * checkpoint_deltas``), whatever the subscribers' history.
        ``salvage`` skips ack records whose CRC fails (listed in ``report.salvaged``)
        instead of raising :class:`~quiver_spark.errors.ChecksumMismatchError`."""
        if objects is None:
            raise TypeError("an object ack journal needs the root's ObjectStore (objects=...)")
        journal = cls(root, objects, checkpoint_records, salvage)
        read_at_open(
            journal,
            journal._replay,
            lambda: f"deltas={journal._head - journal.replayed.checkpoint_gen}",
        )
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
        """:meth:`open`, or None when nothing was ever appended (opening created
        nothing: it cost one GET and one LIST)."""
        journal = cls.open(
            root, io=io, checkpoint_records=checkpoint_records, salvage=salvage, objects=objects
        )
        if journal.exists():
            return journal
        journal.close()
        return None

    def _replay(self) -> Replayed:
        with self.mutex:
            self._reload()
            return self.replayed

    def exists(self) -> bool:
        """True once anything was ever appended (a CHECKPOINT or a delta was found)."""
        return self._ckpt_known is not None or self._head > 0

    def close(self) -> None:
        with self.mutex:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"subscriber registry {self.dir} is closed")

    @contextlib.contextmanager
    def _caught_up(self) -> Iterator[None]:
        with self.mutex:
            self._check_open()
            self._catch_up_objects()
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """A fresh state held against this process's other threads. There is no lock
        between processes on an object root: each mutation inside is validated again
        at its own commit (:meth:`transact`), so a decision's records (retention's
        ``condemn``: dropped + deleted) are one transaction against the newest state."""
        with self._caught_up():
            yield

    def refresh(self) -> None:
        """Read what others appended: one LIST (plus one GET per new delta)."""
        with self._caught_up():
            pass

    # -- reading -----------------------------------------------------------------------
    def _get_checkpoint(self) -> tuple[Stored | None, dict[str, Any] | None]:
        got = self.objects.get(CHECKPOINT_KEY)
        if got is None:
            return None, None
        body = decode_frame(self.objects.display(CHECKPOINT_KEY), MAGIC_CHECKPOINT, got.data)
        gen = int(body.get("log_gen", 0))
        self._ckpt_known = (gen, got.version)
        if all(g != gen for g, _ in self._seen_ckpts):
            self._seen_ckpts.append((gen, self.clock()))
        return got, body

    def _reload(self, got: tuple[Stored | None, dict[str, Any] | None] | None = None) -> None:
        """Rebuild the state from CHECKPOINT and the deltas above it; the state is
        replaced only once all of it was read."""
        stored, body = got if got is not None else self._get_checkpoint()
        replayed = Replayed.from_checkpoint(self.objects.display(CHECKPOINT_KEY), body)
        gen = replayed.checkpoint_gen
        tokens = {} if body is None else _tokens_of(body)
        listed_at = self.clock()
        infos = self.objects.list(DELTA_PREFIX, after=delta_key(gen))
        nums = sorted(n for n in (parse_delta(i.key) for i in infos) if n is not None)
        head, deltas = gen, 0
        salvaged: list[tuple[str, int]] = []
        for n in nums:
            if n != head + 1:
                again = self.objects.get(CHECKPOINT_KEY)
                if again is not None and (stored is None or again.version != stored.version):
                    self._reload()  # a checkpoint written meanwhile: start from it
                    return
                missing = self.objects.display(delta_key(head + 1))
                if not self.salvage:
                    raise CorruptionError(
                        missing, 0, f"ack-log delta missing (deltas {head + 1}..{n - 1})"
                    )
                log.warning("quiver.acklog.salvage_missing key=%s through=%d", missing, n - 1)
                salvaged.append((missing, 0))
            facts, token, skipped = self._read_delta(n)
            if facts is None:  # deleted between the listing and the read
                self._reload()
                return
            salvaged.extend(skipped)
            replayed.apply(facts)
            tokens[n] = token
            head, deltas = n, deltas + 1
        self.replayed, self._head = replayed, head
        self._tokens = {k: v for k, v in tokens.items() if k > head - TOKEN_WINDOW}
        self._listed_at = listed_at
        self.report.checkpoint_gen = gen
        self.report.log_files += deltas
        self.report.salvaged.extend(salvaged)
        self.salvaged_records += len(salvaged)

    def _read_delta(self, n: int) -> tuple[acklog.Facts | None, int, list[tuple[str, int]]]:
        key = delta_key(n)
        got = self.objects.get(key)
        if got is None:
            return None, 0, []
        name = self.objects.display(key)
        gen, data, skipped = acklog.read_whole(name, got.data, salvage=self.salvage)
        if gen != n:
            raise CorruptionError(name, 8, f"delta header says generation {gen}, key says {n}")
        facts = acklog.decode_records(data)
        facts.position = n
        return (
            facts,
            acklog.header_token(got.data),
            [(name, off) for off in skipped],
        )

    def _catch_up_objects(self) -> None:
        """Apply the deltas others created since the cursor: one LIST, one GET each.

        After an idle spell of half the horizon, CHECKPOINT is read first: a delta
        just above an old cursor may be one a stalled appender created below a
        checkpoint (void), which only the checkpoint tells apart."""
        if self._listed_at is not None and self.clock() - self._listed_at >= self.horizon_s / 2:
            got = self._get_checkpoint()
            if got[1] is not None and int(got[1].get("log_gen", 0)) > self._head:
                self._reload(got)
                return
        listed_at = self.clock()
        infos = self.objects.list(DELTA_PREFIX, after=delta_key(self._head))
        for n in sorted(n for n in (parse_delta(i.key) for i in infos) if n is not None):
            if n != self._head + 1:  # covered by a newer checkpoint (or missing)
                self._reload()
                return
            facts, token, skipped = self._read_delta(n)
            if facts is None:
                self._reload()
                return
            self._apply(n, token, facts)
            self.report.salvaged.extend(skipped)
            self.salvaged_records += len(skipped)
        self._listed_at = listed_at

    def _apply(self, n: int, token: int, facts: acklog.Facts) -> None:
        facts.position = n
        self.replayed.apply(facts)
        self._head = n
        self._tokens[n] = token
        self._tokens.pop(n - TOKEN_WINDOW, None)

    # -- writing -----------------------------------------------------------------------
    def encoder(self) -> acklog.RecordEncoder:
        assert self._pending is not None, "records are built inside transact"
        n, token = self._pending
        return acklog.RecordEncoder(checksum(acklog.encode_header(n, token)))

    def transact(self, build: Build) -> acklog.RecordEncoder | None:
        """:meth:`~.journal.Journal.transact` without a lock: catch up (1 LIST), ``build`` on that state, create delta ``head + 1``
        (1 create); on ``ObjectExists``/409 catch up and build again (bounded, with
        jitter: :data:`~quiver_spark.control.cas.ATTEMPTS` and
        :func:`~quiver_spark.control.cas.pause`, as every conditional write; not
        :func:`~quiver_spark.control.cas.update`, since a lost race moves on to the
        next delta number rather than replacing the key it read).
        A lost response is resolved by the token (committed: done; absent:
        built and tried again); when it cannot be resolved the error is raised and the
        state is what the deltas read so far describe, so the call can be retried."""
        with self.mutex:
            self._check_open()
            conflicts = unknown = 0
            while True:
                self._catch_up_objects()
                started = self._listed_at
                assert started is not None
                n, token = self._head + 1, _new_token()
                self._pending = (n, token)
                try:
                    enc = build()
                finally:
                    self._pending = None
                if enc is None or not enc.parts:
                    return None
                key = delta_key(n)
                data = acklog.encode_header(n, token) + enc.data()
                try:
                    self.objects.create(key, data)
                except (ObjectExists, ObjectConflict) as e:
                    conflicts += 1
                    if conflicts >= cas.ATTEMPTS:
                        raise ObjectConflict(
                            self.objects.display(key),
                            f"{self.objects.display(key)}: another append took each of "
                            f"{conflicts} numbers tried; nothing of this call was written, "
                            "retry it",
                        ) from e
                    cas.pause(conflicts, self.sleep)
                    continue
                except OSError as e:
                    unknown += 1
                    log.warning("quiver.acklog.create_unknown key=%s error=%s", key, e)
                    self._catch_up_objects()
                    if self._tokens.get(n) == token:
                        self._maybe_checkpoint()
                        return enc  # it was written: the catch-up applied it
                    # the store already spent its retry budget on this create (§2.2):
                    # one more round would only spend it again
                    if unknown >= UNKNOWN_ATTEMPTS or isinstance(
                        e, (RetriesExhausted, RequestRejected)
                    ):
                        raise
                    continue
                if self.clock() - started >= self.horizon_s / 2 and not self._counts(n, token):
                    log.warning(
                        "quiver.acklog.void_delta key=%s (created below a checkpoint; "
                        "written again above it)",
                        key,
                    )
                    with contextlib.suppress(OSError):
                        self.objects.delete(key)
                    continue
                self._apply(n, token, acklog.decode_records(enc.data()))
                self._maybe_checkpoint()
                return enc

    def _counts(self, n: int, token: int) -> bool:
        """After a slow create of delta ``n``: does it count? It does unless a
        checkpoint covers ``n`` without holding our token (then the number had been
        deleted and our create re-used it: nobody reads it)."""
        _, body = self._get_checkpoint()
        if body is None or int(body.get("log_gen", 0)) < n:
            return True
        gen = int(body["log_gen"])
        tokens = _tokens_of(body)
        if n in tokens or n > gen - TOKEN_WINDOW:
            return tokens.get(n) == token
        with contextlib.suppress(OSError):
            self.objects.delete(delta_key(n))
        shown = self.objects.display(delta_key(n))
        raise OutcomeUnknownError(
            shown,
            f"{shown}: append stalled past checkpoint {gen}, "
            "whether it was counted is unknown; retry the call",
        )

    # -- checkpoint ----------------------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        n, gen = self._head, self.replayed.checkpoint_gen
        k = max(1, self.checkpoint_deltas)
        due = n % k == 0 or n - gen >= 2 * k or self.maintenance_error is not None
        known = self._ckpt_known[0] if self._ckpt_known is not None else 0
        if n <= known:
            self.maintenance_error = None  # a checkpoint at least this far exists
            return
        if not (due or self.replayed.since_checkpoint >= self.checkpoint_records):
            return
        try:
            self._write_checkpoint()
            self.maintenance_error = None
        except (OSError, QuiverError, PreconditionFailed) as e:  # the append is durable
            self.maintenance_error = e
            log.error(
                "quiver.acklog.checkpoint_failed dir=%s error=%s (retried at a later append)",
                self.dir,
                e,
            )

    def checkpoint(self) -> None:
        """Catch up and write a checkpoint at the head (raises on failure)."""
        with self._caught_up():
            self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        """CHECKPOINT := the state at the head, only if newer than the one there
        (replace If-Match the version read; create when there is none); then delete
        the deltas an older checkpoint covers once it has been known for the horizon."""
        n = self._head
        if self._ckpt_known is not None and self._ckpt_known[0] >= n:
            return
        body = self.state.to_body(n, self.replayed.records_total)
        body["tokens"] = {k: v for k, v in self._tokens.items() if k > n - TOKEN_WINDOW}
        data = encode_frame(MAGIC_CHECKPOINT, body)
        looked = [False]

        def read() -> cas.Current[int]:
            """The newest CHECKPOINT known (gen and version; first as this handle
            last saw it, after a lost write as stored now)."""
            if looked[0]:
                stored, _ = self._get_checkpoint()
                if stored is None:
                    self._ckpt_known = None
            looked[0] = True
            known = self._ckpt_known
            return cas.Current(*known) if known is not None else cas.Current(None, None)

        written = cas.update(
            self.objects,
            CHECKPOINT_KEY,
            # someone checkpointed at least as far: nothing to write
            lambda gen: None if gen is not None and gen >= n else n,
            read=read,
            encode=lambda _: data,
        )
        if written is None:
            return
        self._ckpt_known = (n, written.version)
        self.replayed.checkpoint_gen, self.replayed.since_checkpoint = n, 0
        self._seen_ckpts.append((n, self.clock()))
        self.report.checkpoint_gen = n
        log.info("quiver.acklog.checkpoint gen=%d dir=%s", n, self.dir)
        self._delete_covered()

    def _delete_covered(self) -> None:
        now = self.clock()
        gen = self.replayed.checkpoint_gen
        ripe = [g for g, t in self._seen_ckpts if now - t >= self.horizon_s and g < gen]
        if not ripe or max(ripe) <= self._deleted_upto:
            return
        upto = max(ripe)
        infos = self.objects.list(DELTA_PREFIX, after=delta_key(self._deleted_upto))
        gone = [n for n in (parse_delta(i.key) for i in infos) if n is not None and n <= upto]
        for n in gone:
            self.objects.delete(delta_key(n))
        self._deleted_upto = upto
        self._seen_ckpts = [(g, t) for g, t in self._seen_ckpts if g > upto]
        log.info("quiver.acklog.deltas_deleted upto=%d count=%d", upto, len(gone))

    # -- stats ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """The POSIX log's figures, the head delta standing for the log generation."""
        return {
            **self.replayed.figures(self._head, 0, self.salvaged_records),
            "deltas_since_checkpoint": self._head - self.replayed.checkpoint_gen,
        }


def _tokens_of(body: dict[str, Any]) -> dict[int, int]:
    """The delta tokens a checkpoint holds."""
    return {int(k): int(v) for k, v in dict(body.get("tokens", {})).items()}


def _new_token() -> int:
    while True:
        token = secrets.randbits(64)
        if token:
            return token
