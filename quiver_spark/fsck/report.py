"""What fsck finds, and one run of it: the finding kinds, a finding, the report, and
:class:`FsckRun`, what every check shares (the store, the report it fills, the root's
objects)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import layout
from ..errors import CorruptionError, ObjectNotFound
from ..store import QuiverStore

CHECKED_KEYS = (
    "store", "policy", "states", "wal_files", "wal_records", "wal_bytes", "segments",
    "segment_bytes", "quarantined_segments", "commits", "subscriber_files",
    "subscriber_records", "advisory_files", "manifests", "leases",
)  # fmt: skip
"""What :attr:`FsckReport.checked` counts."""


class FindingKind(enum.StrEnum):
    """What a finding is about: the file kinds of ARCHITECTURE.md §22's damage table, and
    the states fsck tells apart (a torn WAL tail, an orphan or pending segment). The value
    is the word ``quiver fsck`` prints and ``--json`` carries."""

    STORE = "store"
    POLICY = "policy"
    POLICY_COPY = "policy_copy"
    STATE = "state"
    WAL = "wal"
    WAL_TORN_TAIL = "wal_torn_tail"
    HEARTBEAT = "heartbeat"
    SEGMENT = "segment"
    SEGMENT_META = "segment_meta"
    SEGMENT_ORPHAN = "segment_orphan"
    SEGMENT_PENDING = "segment_pending"
    MANIFEST = "manifest"
    GONE = "gone"
    LEASE = "lease"
    QUARANTINE_MARK = "quarantine_mark"
    STAGED = "staged"
    COMMIT = "commit"
    ACKLOG = "acklog"
    SUBSCRIBERS = "subscribers"
    SUBSCRIBER_RECORD = "subscriber_record"
    LOST_LOG = "lost_log"
    METRICS = "metrics"
    ADVISORY = "advisory"
    LOCK = "lock"
    READER_LOCK = "reader_lock"


@dataclass
class Finding:
    """One problem or warning, located by file and (where known) byte offset."""

    kind: FindingKind
    file: str
    reason: str
    offset: int | None = None
    partition: str | None = None
    seq: int | None = None
    action: str | None = None

    def line(self) -> str:
        where = self.file if self.offset is None else f"{self.file}:{self.offset}"
        text = f"{self.kind}: {where}: {self.reason}"
        return f"{text} [{self.action}]" if self.action else text


@dataclass
class FsckReport:
    """What :class:`StoreChecker` found."""

    path: str
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECKED_KEYS, 0))
    quarantined: int = 0
    notes: list[Finding] = field(default_factory=list)
    """What is neither a problem nor a warning: an expired or released lease, what
    cannot be seen from here (another machine's WAL on an object root)."""

    def healthy(self, strict: bool = False) -> bool:
        """No problem found (and, with ``strict``, no warning either)."""
        return not self.problems and not (strict and self.warnings)


Task = tuple[int, Callable[[], None]]
"""A unit of verification: its weight for the progress bar (bytes) and the work."""


class FsckRun:
    """One run of fsck over ``store``: the report it fills, whether it may quarantine,
    and what every check does alike (record a finding, read an object of the root)."""

    def __init__(self, store: QuiverStore, *, quarantine: bool = False) -> None:
        self.store = store
        self.quarantine = quarantine
        self.report = FsckReport(store.root)

    # -- findings -----------------------------------------------------------------------
    def problem(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> Finding:
        f = Finding(kind, file, reason, **kw)
        self.report.problems.append(f)
        return f

    def warning(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> None:
        self.report.warnings.append(Finding(kind, file, reason, **kw))

    def corruption(self, kind: FindingKind, e: CorruptionError, **kw: Any) -> Finding:
        return self.problem(kind, e.path, e.reason, offset=e.offset, **kw)

    def note(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> None:
        self.report.notes.append(Finding(kind, file, reason, **kw))

    # -- the root's objects ---------------------------------------------------------------
    def shown(self, key: str) -> str:
        """Where object ``key`` of the root is, as findings name it."""
        return self.store.objects.display(key)

    def read(self, key: str) -> bytes:
        """Object ``key`` of the root (:class:`ObjectNotFound`, a FileNotFoundError, when
        absent)."""
        got = self.store.objects.get(key)
        if got is None:
            raise ObjectNotFound(self.shown(key))
        return got.data

    def keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (data only: the POSIX root's ``.objects.lock`` files,
        which order its conditional writes, hold no data and are passed over)."""
        try:
            infos = self.store.objects.list(prefix)
        except FileNotFoundError:
            return []
        return [i.key for i in infos if not i.key.rsplit("/", 1)[-1] == layout.objects_lock()]
