"""Verify every file kind of a store without changing it (``quiver fsck``; ARCHITECTURE.md §5-§8).

Checked, in order: the STORE descriptor; POLICY and its copy ``POLICY.copy``; per
partition its STATE, HEARTBEAT, LOCK holder info (on this machine: an object root's
writers keep these on their own disks, which a note says) and every WAL file (scanned
read-only through a memory map: a torn tail is reported, never cut — the next
writer's recovery cuts it); every published segment's ``.meta`` and ``.arrow``
(size, CRC-32C, Arrow footer, schema, every batch decodable); each partition's
MANIFEST against what is published, and its LEASE (object roots); the quarantine mark
(and the quarantined segments, counted); every transaction commit record; the
subscriber registry (ack logs and checkpoint; an object root's deltas) and every
``.sub`` record; the advisory files ``readers/*.lock``, ``readers/*.lost.jsonl`` and
``metrics/*.prom``, and the consumer leases ``readers/*.lease``. Everything under the
root is read through its :class:`~quiver_spark.objects.ObjectStore` (``store.objects``),
so a POSIX root and an object root are checked alike; ``.objects.lock`` files are not
data and are passed over.
With ``quarantine`` each corrupt segment is moved to ``<segments>/<partition>/quarantine/``
(the partition's writer lock is taken for it; a partition with a live writer is
skipped and says so). The table of ARCHITECTURE.md "Damage and what it affects"
says, per kind, what a finding means and the command that repairs it.

A problem is damage that loses data or keeps a guarantee from holding until it is
repaired (STORE, POLICY, STATE, WAL, segments, commit records, ack log, checkpoint);
a warning is what a crash leaves and recovery repairs (a torn WAL or ack-log tail, an
unpublished segment file) or damage to a file nothing correct depends on (heartbeat,
lock holder info, quarantine mark, POLICY's copy, ``.sub`` records, lost logs,
metrics). :func:`check_store` returns an :class:`FsckReport`; ``quiver fsck`` only
renders it.

``Finding.kind`` is one of ``store``, ``policy``, ``policy_copy``, ``state``, ``wal``,
``wal_torn_tail``, ``segment``, ``segment_meta``, ``segment_orphan``, ``segment_pending``,
``heartbeat``,
``lock``, ``quarantine_mark``, ``commit``, ``subscribers``, ``subscriber_record``,
``reader_lock``, ``lost_log``, ``metrics``, ``manifest``, ``lease``, ``acklog`` (an object
root's ack-log deltas and CHECKPOINT), ``advisory``; ``action`` is ``"quarantined to <path>"``
or ``"not quarantined: <why>"`` when quarantining acted on the finding.
"""

from __future__ import annotations

import enum
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import format as fmt
from . import policy, staging
from .config import NAME_RE
from .control.lease import Lease
from .control.lease import _decode as decode_lease
from .control.manifest import Manifest, manifest_key
from .errors import CorruptionError, LockedError, QuiverError, SegmentMissingError
from .fs import PartitionLock
from .metrics import METRICS_DIR
from .ranges import RangeSet
from .segment import SegmentMeta
from .store import QuiverStore
from .wal import list_wal_files, scan_wal_file, wal_limits

log = logging.getLogger(__name__)

OBJECTS_LOCK = ".objects.lock"
"""The lock file a POSIX root's :class:`~quiver_spark.objects.local.LocalObjects` keeps
per directory for its conditional writes: not data, never checked."""

CHECKED_KEYS = (
    "store", "policy", "states", "wal_files", "wal_records", "wal_bytes", "segments",
    "segment_bytes", "quarantined_segments", "commits", "subscriber_files",
    "subscriber_records", "advisory_files", "manifests", "leases",
)  # fmt: skip
"""What :attr:`FsckReport.checked` counts."""


class FindingKind(enum.StrEnum):
    """What a finding is about: the file kinds of ARCHITECTURE.md §11's damage table, and
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


class StoreChecker:
    """Lists and runs the checks of one store (read-only unless quarantining)."""

    def __init__(self, store: QuiverStore, *, quarantine: bool = False) -> None:
        self.store = store
        self.quarantine = quarantine
        self.report = FsckReport(store.root)
        self._wal_last_seq: dict[str, tuple[int, int | None]] = {}

    # -- the checks -------------------------------------------------------------------
    def list_checks(self) -> list[Task]:
        """Every check as a weighted task; listing errors become findings at once."""
        tasks: list[Task] = [(1, self._check_store_file), (1, self._check_policy)]
        for pid in self._wal_partitions():
            tasks.extend(self._partition_checks(pid))
        if self.store.on_objects:
            self._note(
                FindingKind.WAL, self.store.wal_root, "only this machine's WAL is checked: a writer on "
                "another machine keeps its WAL, STATE and HEARTBEAT on that machine's disk",
            )  # fmt: skip
        segment_partitions = self._segment_partitions()
        for pid in segment_partitions:
            tasks.extend(self._segment_checks(pid))
        for pid in sorted(set(segment_partitions) | set(self._control_partitions())):
            tasks.append((1, lambda pid=pid: self._check_manifest(pid)))  # type: ignore[misc]
            if self.store.on_objects:
                key = fmt.writer_lease_key(pid)
                tasks.append((1, lambda key=key, pid=pid: self._check_lease(key, pid)))  # type: ignore[misc]
        tasks.append((1, self._check_quarantine_mark))
        if self.store.on_objects:
            tasks.extend(self._staged_checks())
        tasks.extend(self._commit_checks())
        tasks.extend(self._subscriber_checks())
        tasks.extend(self._advisory_checks())
        return tasks

    def run(self, tasks: list[Task], progress: Callable[[int], None] | None = None) -> FsckReport:
        """Run ``tasks`` in order, calling ``progress(weight)`` after each."""
        for weight, work in tasks:
            work()
            if progress is not None:
                progress(weight)
        return self.report

    def _wal_partitions(self) -> list[str]:
        root = self.store.wal_root
        return [
            p
            for p in self.store.io.listdir(root)
            if NAME_RE.fullmatch(p) and os.path.isdir(os.path.join(root, p))
        ]

    def _control_partitions(self) -> list[str]:
        """Partitions with an object under ``partitions/`` of the root (MANIFEST, LEASE)."""
        names = {k.split("/")[1] for k in self._keys(f"{fmt.PARTITIONS_DIR}/") if k.count("/") >= 2}
        return sorted(n for n in names if NAME_RE.fullmatch(n))

    def _segment_partitions(self) -> list[str]:
        try:
            return self.store.partitions()
        except (OSError, QuiverError) as e:
            self._problem(
                FindingKind.SEGMENT, self.store.segments_url, f"cannot list partitions: {e}"
            )
            return []

    # -- findings -----------------------------------------------------------------------
    def _problem(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> Finding:
        f = Finding(kind, file, reason, **kw)
        self.report.problems.append(f)
        return f

    def _warning(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> None:
        self.report.warnings.append(Finding(kind, file, reason, **kw))

    def _corruption(self, kind: FindingKind, e: CorruptionError, **kw: Any) -> Finding:
        return self._problem(kind, e.path, e.reason, offset=e.offset, **kw)

    def _note(self, kind: FindingKind, file: str, reason: str, **kw: Any) -> None:
        self.report.notes.append(Finding(kind, file, reason, **kw))

    # -- the root's objects ---------------------------------------------------------------
    def _shown(self, key: str) -> str:
        """Where object ``key`` of the root is, as findings name it."""
        return self.store.objects.display(key)

    def _read(self, key: str) -> bytes:
        """Object ``key`` of the root (FileNotFoundError when absent)."""
        got = self.store.objects.get(key)
        if got is None:
            raise FileNotFoundError(self._shown(key))
        return got.data

    def _keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (data only: the POSIX root's ``.objects.lock`` files,
        which order its conditional writes, hold no data and are passed over)."""
        try:
            infos = self.store.objects.list(prefix)
        except FileNotFoundError:
            return []
        return [i.key for i in infos if not i.key.rsplit("/", 1)[-1] == OBJECTS_LOCK]

    # -- STORE ----------------------------------------------------------------------------
    def _check_store_file(self) -> None:
        path = self._shown(fmt.STORE_FILE)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_STORE, self._read(fmt.STORE_FILE))
            for key in ("format", "uuid"):
                if key not in body:
                    raise CorruptionError(path, fmt.FRAME_SIZE, f"STORE lacks {key!r}")
        except CorruptionError as e:
            self._corruption(FindingKind.STORE, e)
        except FileNotFoundError:
            self._problem(FindingKind.STORE, path, "missing")
        self.report.checked["store"] += 1

    # -- POLICY and its copy --------------------------------------------------------------
    def _check_policy(self) -> None:
        root = self.store.root
        path, copy = self._shown(policy.POLICY_FILE), self._shown(policy.POLICY_COPY_FILE)
        self.report.checked["policy"] += 1
        try:
            recorded = policy.read_recorded(self.store.objects)
        except OSError as e:
            self._problem(FindingKind.POLICY, path, f"cannot read: {e}")
            return
        except CorruptionError as e:
            self._problem(
                FindingKind.POLICY, e.path, f"{e.reason}; every process applies the most conservative "
                f"policy until it is repaired with: {policy.repair_hint(root)}", offset=e.offset,
            )  # fmt: skip
            recorded = None
        else:
            if recorded is None:
                self._warning(
                    FindingKind.POLICY, path, "none recorded (a store from before POLICY existed): the "
                    "next writer records its options as the store's policy",
                )  # fmt: skip
                return
        try:
            fmt.decode_frame(copy, fmt.MAGIC_POLICY, self._read(policy.POLICY_COPY_FILE))
        except FileNotFoundError:
            if recorded is not None:
                self._warning(
                    FindingKind.POLICY_COPY, copy, "missing: a damaged POLICY could only be repaired from "
                    f"explicit values; write it with: quiver config {root} repair",
                )  # fmt: skip
            return
        except OSError as e:
            self._warning(FindingKind.POLICY_COPY, copy, f"cannot read: {e} (only repair reads it)")
            return
        except CorruptionError as e:
            fix = f"quiver config {root} repair" if recorded else "repair POLICY with KEY=VALUE"
            self._warning(
                FindingKind.POLICY_COPY, e.path, f"{e.reason} (only repair reads it; rewrite it with: "
                f"{fix})", offset=e.offset,
            )  # fmt: skip
        self.report.checked["policy"] += 1

    # -- partitions: STATE, HEARTBEAT, WAL -------------------------------------------------------
    def _partition_checks(self, pid: str) -> list[Task]:
        pdir = os.path.join(self.store.wal_root, pid)
        tasks: list[Task] = [(1, lambda: self._check_state(pid, pdir))]
        infos = list_wal_files(os.path.join(pdir, fmt.WAL_DIR), self.store.io)
        limits = self._wal_limits(pdir)
        for i, info in enumerate(infos):
            last = i == len(infos) - 1
            upto = limits.get(info.first_seq)
            tasks.append((max(1, info.size), self._wal_task(pid, info.path, last, upto)))
        if len(infos) > 1:
            tasks.append((1, lambda: self._check_wal_continuity(pid, [f.path for f in infos])))
        return tasks

    def _check_state(self, pid: str, pdir: str) -> None:
        io = self.store.io
        state = os.path.join(pdir, fmt.STATE_FILE)
        try:
            body = fmt.decode_frame(state, fmt.MAGIC_STATE, io.read_file(state))
            for key in ("next_seq", "covered"):
                if key not in body:
                    raise CorruptionError(state, fmt.FRAME_SIZE, f"STATE lacks {key!r}")
            self.report.checked["states"] += 1
        except FileNotFoundError:  # a partition that never finalized has no STATE
            if self._has_segment_files(pid):
                self._warning(
                    FindingKind.STATE, state, "missing while the partition has segments: its next "
                    "writer starts above the highest segment seq on disk (a seq retention "
                    "deleted from the top is not reused only if the ack log recorded it)",
                    partition=pid,
                )  # fmt: skip
        except CorruptionError as e:
            self._corruption(FindingKind.STATE, e, partition=pid)
            self.report.checked["states"] += 1
        beat = os.path.join(pdir, fmt.HEARTBEAT_FILE)
        try:
            fmt.decode_frame(beat, fmt.MAGIC_HEARTBEAT, io.read_file(beat))
        except FileNotFoundError:
            pass
        except CorruptionError as e:
            self._warning(
                FindingKind.HEARTBEAT, e.path, f"{e.reason} (advisory file, rewritten by the writer)",
                offset=e.offset, partition=pid,
            )  # fmt: skip
        self.report.checked["advisory_files"] += 1
        self._check_lock_info(os.path.join(pdir, fmt.LOCK_FILE), FindingKind.LOCK, pid)

    def _check_lock_info(self, path: str, kind: FindingKind, pid: str | None = None) -> None:
        """A lock file's holder info: JSON, read only to name a holder (advisory)."""
        try:
            raw = self.store.io.read_file(path)
        except FileNotFoundError:
            return
        self.report.checked["advisory_files"] += 1
        if raw:  # empty: created, never held
            self._lock_info(path, raw, kind, pid)

    def _lock_info(self, path: str, raw: bytes, kind: FindingKind, pid: str | None = None) -> None:
        try:
            info = json.loads(raw)
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            self._warning(
                kind, path, f"holder info unreadable: {type(e).__name__} (advisory: the lock "
                "is the flock, not the content; the next holder rewrites it)", partition=pid,
            )  # fmt: skip

    def _has_segment_files(self, pid: str) -> bool:
        try:
            listing = self.store.segment_location.listing(pid)
        except (OSError, QuiverError):
            return False
        return bool(listing.published or listing.unpublished)

    def _wal_limits(self, pdir: str) -> dict[int, int]:
        """The WAL files STATE cuts after a failed write or fsync (§6.2 ``wal_limit``);
        none when STATE is missing or damaged (``_check_state`` reports that)."""
        state = os.path.join(pdir, fmt.STATE_FILE)
        try:
            body = fmt.decode_frame(state, fmt.MAGIC_STATE, self.store.io.read_file(state))
            return wal_limits(state, body)
        except (FileNotFoundError, CorruptionError):
            return {}

    def _wal_task(self, pid: str, path: str, last: bool, upto: int | None) -> Callable[[], None]:
        def work() -> None:
            try:
                scan = scan_wal_file(path, last=last, salvage=True, io=self.store.io, upto=upto)
            except FileNotFoundError:
                return  # truncated away by a live writer after it finalized
            except CorruptionError as e:
                self._corruption(FindingKind.WAL, e, partition=pid)
                return
            self.report.checked["wal_files"] += 1
            self.report.checked["wal_records"] += len(scan.records)
            self.report.checked["wal_bytes"] += scan.valid_bytes + scan.torn_bytes
            for offset, reason in scan.skipped:
                self._problem(FindingKind.WAL, path, reason, offset=offset, partition=pid)
            if scan.torn_bytes:
                self._warning(
                    FindingKind.WAL_TORN_TAIL,
                    path,
                    f"torn tail of {scan.torn_bytes} bytes after the last whole record "
                    "(left in place; the partition's next writer cuts it on open)",
                    offset=scan.valid_bytes,
                    partition=pid,
                )
            self._wal_last_seq[path] = (
                scan.first_seq, scan.records[-1].seq if scan.records else None
            )  # fmt: skip

        return work

    def _check_wal_continuity(self, pid: str, paths: list[str]) -> None:
        # A file deleted as unneeded may lie between two kept ones: its seqs went into
        # STATE's `covered` before the unlink, so a gap `covered` holds whole is no damage
        # (ARCHITECTURE.md §4, Rotation; recovery accepts exactly these). Without a
        # readable STATE (which _check_state reports) no gap is explained.
        state = os.path.join(self.store.wal_root, pid, fmt.STATE_FILE)
        try:
            body = fmt.decode_frame(state, fmt.MAGIC_STATE, self.store.io.read_file(state))
            covered = RangeSet(tuple(r) for r in body.get("covered") or [])
        except (OSError, CorruptionError, TypeError, ValueError):
            covered = RangeSet()
        expected: int | None = None
        for path in paths:
            seen = self._wal_last_seq.get(path)
            if seen is None:
                expected = None
                continue
            first, last = seen
            if expected is not None and first != expected:
                if first > expected and covered.covers(expected, first - 1):
                    expected = last + 1 if last is not None else first
                    continue
                why = (
                    f"STATE's covered does not hold seqs {expected}..{first - 1}"
                    if first > expected
                    else "the files overlap"
                )
                self._problem(
                    FindingKind.WAL, path, f"wal files not contiguous: expected first seq {expected}, "
                    f"found {first} ({why})", offset=0, partition=pid,
                )  # fmt: skip
            expected = last + 1 if last is not None else first

    # -- segments ---------------------------------------------------------------------------
    def _segment_checks(self, pid: str) -> list[Task]:
        loc = self.store.segment_location
        listing = loc.listing(pid)
        floor, publishing = self._state_floor(pid)
        for seq in listing.unpublished:
            if seq == publishing:
                self._warning(
                    FindingKind.SEGMENT_PENDING, loc.data_path(pid, seq),
                    "segment committed in STATE but not yet published (the partition's next "
                    "writer publishes it; do not remove it)", partition=pid, seq=seq,
                )  # fmt: skip
                continue
            if seq < floor:
                self._problem(
                    FindingKind.SEGMENT_META, loc.data_path(pid, seq),
                    f"its .meta is missing: segment {seq} was published (the partition's "
                    f"next seq is {floor}), so readers count it missing; the partition's next "
                    "writer deletes this .arrow (copy it away first to keep its rows)",
                    partition=pid, seq=seq,
                )  # fmt: skip
                continue
            self._warning(
                FindingKind.SEGMENT_ORPHAN, loc.data_path(pid, seq),
                "segment file without metadata: never published (recovery removes it)",
                partition=pid, seq=seq,
            )  # fmt: skip
        tasks: list[Task] = []
        for seq in listing.published:
            try:
                meta = loc.read_meta(pid, seq)
            except SegmentMissingError:
                continue  # deleted by retention since the listing
            except CorruptionError as e:
                f = self._corruption(FindingKind.SEGMENT_META, e, partition=pid, seq=seq)
                tasks.append((1, lambda f=f: self._maybe_quarantine(f)))  # type: ignore[misc]
                self.report.checked["segments"] += 1
                continue
            tasks.append((max(1, meta.size_bytes), self._segment_task(meta)))
        return tasks

    def _state_floor(self, pid: str) -> tuple[int, int | None]:
        """STATE's next seq and the seq being published (0, None when unreadable: every
        segment file without metadata is then taken as never published)."""
        path = os.path.join(self.store.wal_root, pid, fmt.STATE_FILE)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_STATE, self.store.io.read_file(path))
            publishing = body.get("publishing") or {}
            seq = publishing.get("seq")
            return int(body["next_seq"]), int(seq) if seq is not None else None
        except (OSError, CorruptionError, KeyError, TypeError, ValueError):
            return 0, None

    # -- MANIFEST and LEASE (ARCHITECTURE.md §6.7, §12.3) ----------------------------------
    def _check_manifest(self, pid: str) -> None:
        """``partitions/<pid>/MANIFEST``: it decodes, and it agrees with what is
        published (an entry's ``.meta`` exists; a ``.meta`` it lacks is one readers find
        by probing after its ``high``, or one it records deleted)."""
        key = manifest_key(pid)
        shown = self._shown(key)
        first = self._manifest_disagreements(pid, key, shown)
        if not first:
            return
        again = self._manifest_disagreements(pid, key, shown, count=False)  # a pass ran?
        for level, seq, reason in again:
            if (level, seq, reason) in first or level == "damaged":
                if level == "warning":
                    self._warning(FindingKind.MANIFEST, shown, reason, partition=pid, seq=seq)
                else:
                    self._problem(FindingKind.MANIFEST, shown, reason, partition=pid, seq=seq)

    def _manifest_disagreements(
        self, pid: str, key: str, shown: str, *, count: bool = True
    ) -> list[tuple[str, int | None, str]]:
        try:
            raw = self._read(key)
        except FileNotFoundError:
            if count and self._has_segment_files(pid):
                self._warning(
                    FindingKind.MANIFEST, shown, "missing while the partition has segments: readers "
                    "list the partition, and the next reader or writer writes it from the "
                    "listing", partition=pid,
                )  # fmt: skip
            return []
        except OSError as e:
            return [("damaged", None, f"cannot read: {e}")]
        if count:
            self.report.checked["manifests"] += 1
        try:
            m = Manifest.decode(shown, raw)
            if m.partition != pid:
                raise CorruptionError(shown, fmt.FRAME_SIZE, f"names partition {m.partition}")
        except CorruptionError as e:
            return [
                (
                    "damaged", None, f"{e.reason} (readers list the partition instead; its "
                    "next writer or retention pass rewrites it)",
                )
            ]  # fmt: skip
        loc = self.store.segment_location
        try:
            published = set(loc.listing(pid).published)
        except (OSError, QuiverError):
            return []  # the segment checks report the listing
        out: list[tuple[str, int | None, str]] = []
        live = set(m.seqs())
        named = {
            f.seq
            for f in self.report.problems
            if f.kind is FindingKind.SEGMENT_META and f.partition == pid
        }  # a .meta gone with its .arrow left: named by the segment checks already
        for seq in sorted(live - published - named):
            out.append(
                (
                    "problem", seq, f"lists segment {seq}, whose .meta is missing: readers "
                    "count it missing",
                )
            )  # fmt: skip
        probed = m.high + 1
        while probed in published:
            probed += 1
        for seq in sorted(published - live):
            if seq > m.high and seq < probed:
                out.append(
                    (
                        "warning", seq, f"segment {seq} was published after the manifest's "
                        f"high {m.high} and is not in it yet (readers find it by probing; "
                        "the partition's next writer adds it)",
                    )
                )  # fmt: skip
            elif m.deleted(seq):
                out.append(
                    (
                        "warning", seq, f"records segment {seq} deleted, but its .meta remains "
                        "(a deletion stopped between its steps; readers do not see it)",
                    )
                )  # fmt: skip
            else:
                out.append(
                    (
                        "problem", seq, f"lacks published segment {seq} (high {m.high}): new "
                        "readers do not see it",
                    )
                )  # fmt: skip
        return out

    def _check_lease(self, key: str, pid: str | None = None) -> None:
        """A lease object (§12.3): a damaged one is a problem (its next claimant must
        wait out its time to live); a released or expired one is only noted."""
        shown = self._shown(key)
        try:
            raw = self._read(key)
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(FindingKind.LEASE, shown, f"cannot read: {e}", partition=pid)
            return
        self.report.checked["leases"] += 1
        try:
            body = decode_lease(shown, raw)
        except CorruptionError as e:
            self._problem(
                FindingKind.LEASE, e.path, f"{e.reason} (its next claimant waits the lease's time to "
                "live, then takes it over with a higher epoch)", offset=e.offset, partition=pid,
            )  # fmt: skip
            return
        holder = body.holder
        if body.released:
            self._note(
                FindingKind.LEASE, shown, f"released at epoch {body.epoch} by {holder.describe()} "
                "(the next claimant takes it at once)", partition=pid,
            )  # fmt: skip
        elif holder.dead_here():
            self._note(
                FindingKind.LEASE, shown, f"expired: its holder, {holder.describe()}, is gone (the next "
                f"claimant takes it over at once with epoch {body.epoch + 1})", partition=pid,
            )  # fmt: skip
        else:
            self._note(
                FindingKind.LEASE, shown, f"held at epoch {body.epoch} by {holder.describe()} (expired "
                f"if not renewed within {holder.ttl_s:g}s)", partition=pid,
            )  # fmt: skip

    def _segment_task(self, meta: SegmentMeta) -> Callable[[], None]:
        def work() -> None:
            self.report.checked["segments"] += 1
            self.report.checked["segment_bytes"] += meta.size_bytes
            loc = self.store.segment_location
            try:
                with loc.open(meta, verify=True) as reader:
                    for i in range(reader.num_batches):
                        reader.read_batch(i).validate(full=True)
            except SegmentMissingError as e:
                if not loc.is_published(meta.partition, meta.seq):
                    return  # deleted by retention while we checked
                f = self._problem(
                    FindingKind.SEGMENT, self._arrow_path(meta), f"published but {e}",
                    partition=meta.partition, seq=meta.seq,
                )  # fmt: skip
                self._maybe_quarantine(f)
            except CorruptionError as e:
                f = self._corruption(FindingKind.SEGMENT, e, partition=meta.partition, seq=meta.seq)
                self._maybe_quarantine(f)
            except Exception as e:  # an Arrow validation error on a checksummed file
                f = self._problem(
                    FindingKind.SEGMENT, self._arrow_path(meta), f"invalid Arrow data: {e}",
                    partition=meta.partition, seq=meta.seq,
                )  # fmt: skip
                self._maybe_quarantine(f)

        return work

    def _check_quarantine_mark(self) -> None:
        loc = self.store.segment_location
        try:
            raw = loc.quarantine_mark()
        except (OSError, QuiverError) as e:
            self._problem(FindingKind.QUARANTINE_MARK, self.store.segments_url, f"cannot read: {e}")
            return
        counted = 0
        for pid in self._segment_partitions_cached():
            counted += len(loc.quarantined(pid))
        self.report.checked["quarantined_segments"] += counted
        if raw is None:
            if counted:
                self._warning(
                    FindingKind.QUARANTINE_MARK, os.path.join(self.store.segments_url,
                    fmt.QUARANTINE_MARK_NAME), f"missing though {counted} segment(s) are "
                    "quarantined: running readers notice a quarantine by their full listing "
                    "(within 5 minutes) until the next quarantine writes it again",
                )  # fmt: skip
            return
        self.report.checked["advisory_files"] += 1
        path = os.path.join(self.store.segments_url, fmt.QUARANTINE_MARK_NAME)
        try:
            fmt.decode_frame(path, fmt.MAGIC_QUARANTINE_MARK, raw)
        except CorruptionError as e:
            self._warning(
                FindingKind.QUARANTINE_MARK, e.path, f"{e.reason} (readers compare its bytes only, so "
                "it still signals a change; the next quarantine replaces it)", offset=e.offset,
            )  # fmt: skip

    def _segment_partitions_cached(self) -> list[str]:
        try:
            return self.store.partitions()
        except (OSError, QuiverError):
            return []  # already a finding of the segment listing

    def _arrow_path(self, meta: SegmentMeta) -> str:
        return self.store.segment_location.data_path(meta.partition, meta.seq)

    def _maybe_quarantine(self, f: Finding) -> None:
        if not self.quarantine or f.partition is None or f.seq is None:
            return
        lock_path = os.path.join(self.store.wal_root, f.partition, fmt.LOCK_FILE)
        lock: PartitionLock | Lease | None = None
        try:
            if self.store.on_objects:  # the partition's writer lease, as a writer takes it
                lock = Lease.acquire(
                    self.store.objects, fmt.writer_lease_key(f.partition),
                    purpose="quiver fsck --quarantine",
                )  # fmt: skip
            elif os.path.isdir(os.path.dirname(lock_path)):
                lock = PartitionLock.acquire(lock_path, purpose="quiver fsck --quarantine")
            moved = self.store.segment_location.quarantine(f.partition, f.seq, f.line())
        except LockedError as e:
            f.action = f"not quarantined: {e}"
            return
        except (OSError, QuiverError) as e:
            f.action = f"not quarantined: {e}"
            return
        finally:
            if lock is not None:
                lock.release()
        f.action = f"quarantined to {moved}"
        self.report.quarantined += 1

    # -- commits ----------------------------------------------------------------------------
    def _staged_checks(self) -> list[Task]:
        """Object root: every staged transaction ``partitions/<pid>/txns/<id>.txn``
        (§12.6) verifies and names itself."""
        keys = [
            k
            for k in self._keys(f"{fmt.PARTITIONS_DIR}/")
            if k.split("/")[2:3] == [staging.STAGED_DIR] and k.endswith(staging.STAGED_SUFFIX)
        ]
        return [(1, lambda key=key: self._check_staged(key)) for key in keys]  # type: ignore[misc]

    def _check_staged(self, key: str) -> None:
        checked = self.report.checked  # object roots only: counted once there is one
        checked["staged"] = checked.get("staged", 0) + 1
        shown = self._shown(key)
        pid = key.split("/")[1]
        try:
            st = staging.decode_staged(shown, self._read(key))
            stem = key.rsplit("/", 1)[-1].removesuffix(staging.STAGED_SUFFIX)
            if (st.partition, str(st.txn_id).zfill(len(stem))) != (pid, stem):
                raise CorruptionError(
                    shown, fmt.FRAME_SIZE, f"names transaction {st.txn_id} of {st.partition}"
                )
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(FindingKind.STAGED, shown, f"cannot read: {e}", partition=pid)
        except CorruptionError as e:
            self._problem(
                FindingKind.STAGED, e.path, f"{e.reason} (damaged staged transaction: if its batch was "
                "committed and its writer's machine is lost, its rows cannot be sealed; an "
                "observer pass leaves it, a live writer seals its rows from its WAL)",
                offset=e.offset, partition=pid,
            )  # fmt: skip

    def _commit_checks(self) -> list[Task]:
        keys = [k for k in self._keys(f"{fmt.COMMITS_DIR}/") if k.endswith(".commit")]
        return [(1, lambda key=key: self._check_commit(key)) for key in keys]  # type: ignore[misc]

    def _check_commit(self, key: str) -> None:
        self.report.checked["commits"] += 1
        path = self._shown(key)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_COMMIT, self._read(key))
            if "winners" not in body:
                raise CorruptionError(path, fmt.FRAME_SIZE, "commit record lacks 'winners'")
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(FindingKind.COMMIT, path, f"cannot read: {e}")
        except CorruptionError as e:
            self._corruption(FindingKind.COMMIT, e)

    # -- subscribers --------------------------------------------------------------------------
    def _subscriber_checks(self) -> list[Task]:
        if not self.store.has_registry():
            return []
        from .subscribers import records

        tasks: list[Task] = []
        if self.store.on_objects:
            tasks.append((1, self._check_object_registry))
        else:
            sdir = os.path.join(self.store.root, fmt.SUBSCRIBERS_DIR)
            from .subscribers import log as acklog

            gens = acklog.list_generations(self.store.io, sdir)
            tasks.append((1, lambda: self._check_checkpoint(sdir, gens)))
            for gen in gens:
                path = os.path.join(sdir, acklog.log_file_name(gen))
                size = os.path.getsize(path) if os.path.exists(path) else 1
                tasks.append((max(1, size), lambda path=path: self._check_ack_log(path)))  # type: ignore[misc]
        for key in self._keys(records.RECORDS_PREFIX):
            if key.endswith(records.RECORD_SUFFIX):
                tasks.append((1, lambda key=key: self._check_record(key)))  # type: ignore[misc]
        if not self.store.on_objects:
            tasks.append((1, self._check_subscription_records))
        return tasks

    def _check_object_registry(self) -> None:
        """An object root's ack log (§12.5): CHECKPOINT, then every delta above its
        ``log_gen`` present and whole (a damaged delta is a damaged ack-log record), then
        the subscription records against the registrations they replay to."""
        from .subscribers import log as acklog
        from .subscribers import records
        from .subscribers.objects_journal import CHECKPOINT_KEY, DELTA_PREFIX, parse_delta
        from .subscribers.state import RegistryState

        shown = self._shown(CHECKPOINT_KEY)
        state: RegistryState | None = RegistryState()
        first = 1
        try:
            body = fmt.decode_frame(shown, fmt.MAGIC_CHECKPOINT, self._read(CHECKPOINT_KEY))
            state = RegistryState.from_body(shown, body)
            first = int(body["log_gen"]) + 1
            self.report.checked["subscriber_files"] += 1
        except FileNotFoundError:
            pass
        except CorruptionError as e:
            self.report.checked["subscriber_files"] += 1
            self._corruption(FindingKind.ACKLOG, e)
            state = None
        except (KeyError, TypeError, ValueError) as e:
            self.report.checked["subscriber_files"] += 1
            self._problem(FindingKind.ACKLOG, shown, f"invalid checkpoint body: {e}")
            state = None
        nums = sorted(n for k in self._keys(DELTA_PREFIX) if (n := parse_delta(k)) is not None)
        lost = (
            "the acknowledgements it held are lost (subscribers are delivered those segments again)"
        )
        if state is not None and first == 1 and nums and nums[0] > 1:
            self._problem(
                FindingKind.ACKLOG,
                shown,
                f"missing while the ack-log deltas start at {nums[0]}: {lost}",
            )
            state = None
        above = [n for n in nums if n >= first]
        for n in range(first, max(above, default=first - 1) + 1):
            if n not in above:
                self._problem(
                    FindingKind.ACKLOG,
                    self._shown(f"{DELTA_PREFIX}{n:020d}.ack"),
                    f"missing: {lost}",
                )
        for n in above:
            key = f"{DELTA_PREFIX}{n:020d}.ack"
            name = self._shown(key)
            try:
                gen, data, skipped = acklog.read_whole(name, self._read(key), salvage=True)
                if gen != n:
                    raise CorruptionError(name, 8, f"delta header says generation {gen}")
                facts = acklog.decode_records(data)
            except FileNotFoundError:
                continue  # covered by a checkpoint written since, and deleted
            except CorruptionError as e:
                self._corruption(FindingKind.ACKLOG, e)
                state = None
                continue
            self.report.checked["subscriber_files"] += 1
            for off in skipped:
                self._problem(
                    FindingKind.ACKLOG, name, "ack record crc mismatch or unknown kind", offset=off
                )
            if state is not None:
                state.apply(facts)
        if state is None:
            return  # the registrations are not known: the findings above say why
        for sub in records.unregistered(self.store.objects, list(state.by_name)):
            self._problem(
                FindingKind.SUBSCRIBERS, records.record_path(self.store.root, sub),
                records.unregistered_message(self.store.root, sub),
            )  # fmt: skip

    def _check_subscription_records(self) -> None:
        """A subscriber whose record exists but whose registration the ack log lost."""
        from .subscribers import SubscriberRegistry, records

        root, io = self.store.root, self.store.io
        try:
            names = SubscriberRegistry.read_only_subscribers(root, io=io)
        except (OSError, CorruptionError):
            return  # already reported by the checks of the files themselves
        for name in records.unregistered(self.store.objects, names):
            self._problem(
                FindingKind.SUBSCRIBERS, records.record_path(root, name),
                records.unregistered_message(root, name),
            )  # fmt: skip

    def _check_record(self, key: str) -> None:
        """A subscription record (§8.10): the ack log stays the truth of registration and
        progress, so a damaged record is a warning; the consumer's next acknowledgement
        rewrites it, and expiry does not act on that subscriber meanwhile."""
        from .subscribers.records import SubscriptionRecord

        path = self._shown(key)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_SUBSCRIPTION, self._read(key))
            SubscriptionRecord.from_body(path, body)
        except FileNotFoundError:
            return
        except OSError as e:
            self._warning(FindingKind.SUBSCRIBER_RECORD, path, f"cannot read: {e}")
            return
        except CorruptionError as e:
            self._warning(
                FindingKind.SUBSCRIBER_RECORD, e.path, f"{e.reason} (the ack log keeps its registration "
                "and progress; its consumer's next acknowledgement rewrites it, and expiry "
                "skips it meanwhile)", offset=e.offset,
            )  # fmt: skip
        self.report.checked["subscriber_records"] += 1

    def _check_checkpoint(self, sdir: str, gens: list[int]) -> None:
        """CHECKPOINT and the chain of ack logs it starts (§8.5): the logs from its
        ``log_gen`` on must all be there, and without a checkpoint the first log is 1."""
        from .subscribers import log as acklog
        from .subscribers.journal import CHECKPOINT_NAME
        from .subscribers.state import RegistryState

        path = os.path.join(sdir, CHECKPOINT_NAME)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_CHECKPOINT, self.store.io.read_file(path))
            RegistryState.from_body(path, body)
            first = int(body["log_gen"])
        except FileNotFoundError:
            if gens and gens[0] > 1:
                self._problem(
                    FindingKind.SUBSCRIBERS, path, f"missing while the ack logs start at generation "
                    f"{gens[0]}: the acknowledgements and deletions before it are lost "
                    "(subscribers are delivered those segments again)",
                )  # fmt: skip
            return
        except CorruptionError as e:
            self.report.checked["subscriber_files"] += 1
            self._corruption(FindingKind.SUBSCRIBERS, e)
            return
        except (KeyError, TypeError, ValueError) as e:
            self.report.checked["subscriber_files"] += 1
            self._problem(FindingKind.SUBSCRIBERS, path, f"invalid checkpoint body: {e}")
            return
        self.report.checked["subscriber_files"] += 1
        now = acklog.list_generations(self.store.io, sdir)  # after the checkpoint: no race
        for gen in range(first, max([first, *now]) + 1):
            if gen not in now:
                self._problem(
                    FindingKind.SUBSCRIBERS, os.path.join(sdir, acklog.log_file_name(gen)),
                    "missing: the acknowledgements it held since the checkpoint are lost "
                    "(subscribers are delivered those segments again)",
                )  # fmt: skip

    def _check_ack_log(self, path: str) -> None:
        """Verify one ack log read-only: header, every record's chained CRC, decoding."""
        from .subscribers import log as acklog

        io = self.store.io
        try:
            cursor = acklog.open_cursor(io, path)
            tail = acklog.read_tail(io, path, cursor, salvage=True)
            acklog.decode_records(tail.data)
        except FileNotFoundError:
            return  # compacted away by a checkpoint while we checked
        except CorruptionError as e:
            self._corruption(FindingKind.SUBSCRIBERS, e)
            return
        self.report.checked["subscriber_files"] += 1
        for off in tail.skipped:
            self._problem(
                FindingKind.SUBSCRIBERS, path, "ack record crc mismatch or unknown kind", offset=off
            )
        if tail.torn_bytes:
            self._warning(
                FindingKind.SUBSCRIBERS, path,
                f"torn tail of {tail.torn_bytes} bytes (left in place; the registry's next "
                "writer cuts it)", offset=tail.torn_offset,
            )  # fmt: skip

    # -- advisory files: readers/*, metrics/* -----------------------------------------------
    def _advisory_checks(self) -> list[Task]:
        tasks: list[Task] = []
        for key in self._keys(f"{fmt.READERS_DIR}/"):
            if key.endswith(".lease"):
                tasks.append((1, lambda key=key: self._check_lease(key)))  # type: ignore[misc]
            elif key.endswith(".lock"):
                tasks.append((1, lambda key=key: self._check_reader_lock(key)))  # type: ignore[misc]
            elif key.endswith(fmt.LOST_SUFFIX):
                tasks.append((1, lambda key=key: self._check_lost_log(key)))  # type: ignore[misc]
        for key in self._keys(f"{METRICS_DIR}/"):
            if key.endswith(".prom"):
                tasks.append((1, lambda key=key: self._check_metrics_file(key)))  # type: ignore[misc]
        return tasks

    def _advisory(self, key: str) -> bytes | None:
        """An advisory object's bytes; None when it is gone (or unreadable: a warning)."""
        try:
            raw = self._read(key)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._warning(FindingKind.ADVISORY, self._shown(key), f"cannot read: {e}")
            return None
        self.report.checked["advisory_files"] += 1
        return raw

    def _check_reader_lock(self, key: str) -> None:
        raw = self._advisory(key)
        if raw:
            self._lock_info(self._shown(key), raw, FindingKind.READER_LOCK)

    def _check_lost_log(self, key: str) -> None:
        """``readers/<subscriber>.lost.jsonl``: one JSON object a line (a torn last line
        is what a crash leaves); read by operators and ``Subscription.lost()`` only."""
        raw = self._advisory(key)
        if raw is None:
            return
        path = self._shown(key)
        lines = raw.split(b"\n")
        offset = 0
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if line.strip():
                try:
                    if not isinstance(json.loads(line), dict):
                        raise ValueError("not a JSON object")
                except ValueError:
                    if not last:  # a torn last line is no damage
                        self._warning(
                            FindingKind.LOST_LOG, path, "line is not a JSON object (advisory: readers "
                            "skip it; the segments it named are still counted by the ack log)",
                            offset=offset,
                        )  # fmt: skip
                        return
            offset += len(line) + 1

    def _check_metrics_file(self, key: str) -> None:
        """``metrics/<instance>.prom``: advisory; its process restarts its counters from
        zero when it cannot read it back, and ``quiver metrics --all`` skips it."""
        from .metrics import parse_exposition

        raw = self._advisory(key)
        if raw is None:
            return
        try:
            parse_exposition(raw)
        except ValueError as e:
            self._warning(
                FindingKind.METRICS, self._shown(key), f"{e} (advisory: its process restarts its "
                "counters from zero and rewrites it; quiver metrics --all skips it)",
            )  # fmt: skip


def check_store(
    store: QuiverStore,
    *,
    quarantine: bool = False,
    progress: Callable[[int], None] | None = None,
) -> FsckReport:
    """Verify every file of ``store`` (see the module docstring) and report what was found.

    ``progress(weight)`` is called after each unit of work; the weights (mostly bytes)
    sum to that of :meth:`StoreChecker.list_checks`. With ``quarantine`` corrupt segments are
    moved aside; nothing else is ever changed.
    """
    checker = StoreChecker(store, quarantine=quarantine)
    return checker.run(checker.list_checks(), progress)
