"""``quiver fsck PATH``: verify every checksum of a store without changing it.

Checked, in order: the STORE descriptor; per partition its STATE and every WAL file
(scanned read-only through a memory map: a torn tail is reported, never cut — the
next writer's recovery cuts it); every published segment's ``.meta`` and ``.arrow``
(size, CRC-32C, Arrow footer, schema, every batch decodable); every transaction
commit record; the subscriber registry (ack logs and checkpoints, through the
registry's own verification). With ``--quarantine`` each corrupt segment is moved to
``<segments>/<pid>/quarantine/`` (the partition's writer lock is taken for it; a
partition with a live writer is skipped and says so).

Exit 0 when no problem was found, 1 otherwise (even when every corrupt segment was
quarantined: data was lost; a second run then exits 0). Warnings (a torn WAL tail,
an unpublished segment file, an unreadable advisory heartbeat) are what a crash
leaves and recovery repairs; they do not make the store unhealthy unless
``--strict``.

JSON schema (``--json``; ``"schema": "quiver.fsck/1"``)::

    {
      "schema": "quiver.fsck/1", "path": str, "healthy": bool,
      "checked": {"store": int, "states": int, "wal_files": int, "wal_records": int,
                  "wal_bytes": int, "segments": int, "segment_bytes": int,
                  "commits": int, "subscriber_files": int},
      "problems": [Finding], "warnings": [Finding], "quarantined": int
    }
    Finding = {"kind": str, "file": str, "offset": int|null, "reason": str,
               "partition": str|null, "seq": int|null, "action": str|null}

``kind`` is one of ``store``, ``state``, ``wal``, ``wal_torn_tail``, ``segment``,
``segment_meta``, ``segment_orphan``, ``heartbeat``, ``commit``, ``subscribers``;
``action`` is ``"quarantined to <path>"`` or ``"not quarantined: <why>"`` when
``--quarantine`` acted on the finding.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import click
import fsspec

from .. import format as fmt
from ..errors import CorruptionError, LockedError, QuiverError, SegmentMissingError
from ..fs import PartitionLock
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..wal import list_wal_files, scan_wal_file
from .common import (
    EXIT_OK,
    EXIT_TROUBLE,
    StoreArgs,
    check_store_path,
    emit_json,
    human_bytes,
    stderr_is_tty,
    store_arguments,
    store_config,
    wal_partitions,
)

log = logging.getLogger(__name__)

SCHEMA = "quiver.fsck/1"


@dataclass
class Finding:
    """One problem or warning, located by file and (where known) byte offset."""

    kind: str
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
    checked: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("store", "states", "wal_files", "wal_records", "wal_bytes", "segments",
             "segment_bytes", "commits", "subscriber_files"), 0)
    )  # fmt: skip
    quarantined: int = 0

    def healthy(self, strict: bool = False) -> bool:
        return not self.problems and not (strict and self.warnings)

    def to_json(self, strict: bool = False) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "path": self.path,
            "healthy": self.healthy(strict),
            "checked": dict(self.checked),
            "problems": [asdict(f) for f in self.problems],
            "warnings": [asdict(f) for f in self.warnings],
            "quarantined": self.quarantined,
        }


Task = tuple[int, Callable[[], None]]
"""A unit of verification: its weight for the progress bar (bytes) and the work."""


class StoreChecker:
    """Plans and runs the verification of one store (read-only unless quarantining)."""

    def __init__(self, store: QuiverStore, *, quarantine: bool = False) -> None:
        self.store = store
        self.quarantine = quarantine
        self.report = FsckReport(store.root)
        self._wal_last_seq: dict[str, tuple[int, int | None]] = {}

    # -- planning ---------------------------------------------------------------------
    def plan(self) -> list[Task]:
        """Every check as a weighted task; listing errors become findings at once."""
        tasks: list[Task] = [(1, self._check_store_file)]
        for pid in self._wal_partitions():
            tasks.extend(self._plan_partition(pid))
        for pid in self._segment_partitions():
            tasks.extend(self._plan_segments(pid))
        tasks.extend(self._plan_commits())
        tasks.extend(self._plan_subscribers())
        return tasks

    def run(self, tasks: list[Task], progress: Callable[[int], None] | None = None) -> FsckReport:
        """Run ``tasks`` in order, calling ``progress(weight)`` after each."""
        for weight, work in tasks:
            work()
            if progress is not None:
                progress(weight)
        return self.report

    def _wal_partitions(self) -> list[str]:
        return wal_partitions(self.store)

    def _segment_partitions(self) -> list[str]:
        try:
            return self.store.partitions()
        except (OSError, QuiverError) as e:
            self._problem("segment", self.store.segments_url, f"cannot list partitions: {e}")
            return []

    # -- findings -----------------------------------------------------------------------
    def _problem(self, kind: str, file: str, reason: str, **kw: Any) -> Finding:
        f = Finding(kind, file, reason, **kw)
        self.report.problems.append(f)
        return f

    def _warning(self, kind: str, file: str, reason: str, **kw: Any) -> None:
        self.report.warnings.append(Finding(kind, file, reason, **kw))

    def _corruption(self, kind: str, e: CorruptionError, **kw: Any) -> Finding:
        return self._problem(kind, e.path, e.reason, offset=e.offset, **kw)

    # -- STORE ----------------------------------------------------------------------------
    def _check_store_file(self) -> None:
        path = os.path.join(self.store.root, fmt.STORE_FILE)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_STORE, self.store.io.read_file(path))
            for key in ("format", "uuid"):
                if key not in body:
                    raise CorruptionError(path, fmt.FRAME_SIZE, f"STORE lacks {key!r}")
        except CorruptionError as e:
            self._corruption("store", e)
        except FileNotFoundError:
            self._problem("store", path, "missing")
        self.report.checked["store"] += 1

    # -- partitions: STATE, HEARTBEAT, WAL -------------------------------------------------------
    def _plan_partition(self, pid: str) -> list[Task]:
        pdir = os.path.join(self.store.wal_root, pid)
        tasks: list[Task] = [(1, lambda: self._check_state(pid, pdir))]
        infos = list_wal_files(os.path.join(pdir, fmt.WAL_DIR), self.store.io)
        for i, info in enumerate(infos):
            last = i == len(infos) - 1
            tasks.append((max(1, info.size), self._wal_task(pid, info.path, last)))
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
        except FileNotFoundError:
            pass  # a partition that never finalized has no STATE
        except CorruptionError as e:
            self._corruption("state", e, partition=pid)
            self.report.checked["states"] += 1
        beat = os.path.join(pdir, fmt.HEARTBEAT_FILE)
        try:
            fmt.decode_frame(beat, fmt.MAGIC_HEARTBEAT, io.read_file(beat))
        except FileNotFoundError:
            pass
        except CorruptionError as e:
            self._warning(
                "heartbeat", e.path, f"{e.reason} (advisory file, rewritten by the writer)",
                offset=e.offset, partition=pid,
            )  # fmt: skip

    def _wal_task(self, pid: str, path: str, last: bool) -> Callable[[], None]:
        def work() -> None:
            try:
                scan = scan_wal_file(path, last=last, salvage=True, io=self.store.io)
            except FileNotFoundError:
                return  # truncated away by a live writer after it finalized
            except CorruptionError as e:
                self._corruption("wal", e, partition=pid)
                return
            self.report.checked["wal_files"] += 1
            self.report.checked["wal_records"] += len(scan.records)
            self.report.checked["wal_bytes"] += scan.valid_bytes + scan.torn_bytes
            for offset, reason in scan.skipped:
                self._problem("wal", path, reason, offset=offset, partition=pid)
            if scan.torn_bytes:
                self._warning(
                    "wal_torn_tail",
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
        expected: int | None = None
        for path in paths:
            seen = self._wal_last_seq.get(path)
            if seen is None:
                expected = None
                continue
            first, last = seen
            if expected is not None and first != expected:
                self._problem(
                    "wal", path, f"wal files not contiguous: expected first seq {expected}, "
                    f"found {first}", offset=0, partition=pid,
                )  # fmt: skip
            expected = last + 1 if last is not None else first

    # -- segments ---------------------------------------------------------------------------
    def _segment_files(self, pid: str) -> tuple[list[int], list[int], str]:
        """``(meta seqs, arrow seqs, directory)`` of a partition's segment directory."""
        fs, root = fsspec.core.url_to_fs(self.store.segments_url)
        d = f"{root.rstrip('/')}/{pid}"
        try:
            names = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(d, detail=False)]
        except FileNotFoundError:
            names = []
        metas = sorted(s for n in names if (s := fmt.parse_seq(n, fmt.META_SUFFIX)) is not None)
        arrows = sorted(s for n in names if (s := fmt.parse_seq(n, fmt.SEGMENT_SUFFIX)) is not None)
        return metas, arrows, d

    def _plan_segments(self, pid: str) -> list[Task]:
        metas, arrows, d = self._segment_files(pid)
        for seq in sorted(set(arrows) - set(metas)):
            self._warning(
                "segment_orphan", f"{d}/{fmt.segment_file_name(seq)}",
                "segment file without metadata: never published (recovery removes it)",
                partition=pid, seq=seq,
            )  # fmt: skip
        tasks: list[Task] = []
        loc = self.store.segment_location
        for seq in metas:
            try:
                meta = loc.read_meta(pid, seq)
            except SegmentMissingError:
                continue  # deleted by retention since the listing
            except CorruptionError as e:
                f = self._corruption("segment_meta", e, partition=pid, seq=seq)
                tasks.append((1, lambda f=f: self._maybe_quarantine(f)))  # type: ignore[misc]
                self.report.checked["segments"] += 1
                continue
            tasks.append((max(1, meta.size_bytes), self._segment_task(meta)))
        return tasks

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
                    "segment", self._arrow_path(meta), f"published but {e}",
                    partition=meta.partition, seq=meta.seq,
                )  # fmt: skip
                self._maybe_quarantine(f)
            except CorruptionError as e:
                f = self._corruption("segment", e, partition=meta.partition, seq=meta.seq)
                self._maybe_quarantine(f)
            except Exception as e:  # an Arrow validation error on a checksummed file
                f = self._problem(
                    "segment", self._arrow_path(meta), f"invalid Arrow data: {e}",
                    partition=meta.partition, seq=meta.seq,
                )  # fmt: skip
                self._maybe_quarantine(f)

        return work

    def _arrow_path(self, meta: SegmentMeta) -> str:
        return f"{self.store.segments_url.rstrip('/')}/{meta.partition}/" + fmt.segment_file_name(
            meta.seq
        )

    def _maybe_quarantine(self, f: Finding) -> None:
        if not self.quarantine or f.partition is None or f.seq is None:
            return
        lock_path = os.path.join(self.store.wal_root, f.partition, fmt.LOCK_FILE)
        lock: PartitionLock | None = None
        try:
            if os.path.isdir(os.path.dirname(lock_path)):
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
    def _plan_commits(self) -> list[Task]:
        io = self.store.io
        cdir = os.path.join(self.store.root, fmt.COMMITS_DIR)
        tasks: list[Task] = []
        for app in io.listdir(cdir):
            for name in io.listdir(os.path.join(cdir, app)):
                if name.endswith(".commit"):
                    path = os.path.join(cdir, app, name)
                    tasks.append((1, lambda path=path: self._check_commit(path)))  # type: ignore[misc]
        return tasks

    def _check_commit(self, path: str) -> None:
        self.report.checked["commits"] += 1
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_COMMIT, self.store.io.read_file(path))
            if "winners" not in body:
                raise CorruptionError(path, fmt.FRAME_SIZE, "commit record lacks 'winners'")
        except FileNotFoundError:
            return
        except CorruptionError as e:
            self._corruption("commit", e)

    # -- subscribers --------------------------------------------------------------------------
    def _plan_subscribers(self) -> list[Task]:
        sdir = os.path.join(self.store.root, fmt.SUBSCRIBERS_DIR)
        if not os.path.isdir(sdir):
            return []
        from ..subscribers import log as acklog

        tasks: list[Task] = [(1, lambda: self._check_checkpoint(sdir))]
        for gen in acklog.list_generations(self.store.io, sdir):
            path = os.path.join(sdir, acklog.log_file_name(gen))
            size = os.path.getsize(path) if os.path.exists(path) else 1
            tasks.append((max(1, size), lambda path=path: self._check_ack_log(path)))  # type: ignore[misc]
        return tasks

    def _check_checkpoint(self, sdir: str) -> None:
        from ..subscribers.registry import CHECKPOINT_NAME
        from ..subscribers.state import RegistryState

        path = os.path.join(sdir, CHECKPOINT_NAME)
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_CHECKPOINT, self.store.io.read_file(path))
            RegistryState.from_body(path, body)
        except FileNotFoundError:
            return
        except CorruptionError as e:
            self._corruption("subscribers", e)
        self.report.checked["subscriber_files"] += 1

    def _check_ack_log(self, path: str) -> None:
        """Verify one ack log read-only: header, every record's chained CRC, decoding."""
        from ..subscribers import log as acklog

        io = self.store.io
        try:
            cursor = acklog.open_cursor(io, path)
            tail = acklog.read_tail(io, path, cursor, salvage=True)
            acklog.decode_records(tail.data)
        except FileNotFoundError:
            return  # compacted away by a checkpoint while we checked
        except CorruptionError as e:
            self._corruption("subscribers", e)
            return
        self.report.checked["subscriber_files"] += 1
        for off in tail.skipped:
            self._problem(
                "subscribers", path, "ack record crc mismatch or unknown kind", offset=off
            )
        if tail.torn_bytes:
            self._warning(
                "subscribers", path,
                f"torn tail of {tail.torn_bytes} bytes (left in place; the registry's next "
                "writer cuts it)", offset=tail.torn_offset,
            )  # fmt: skip


def open_for_fsck(args: StoreArgs) -> QuiverStore:
    """A store handle even when STORE itself is damaged (its check reports that)."""
    config = store_config(args)
    root = check_store_path(args.path)
    try:
        return QuiverStore.open(root, config, partition=None, create=False, background=False)
    except CorruptionError:
        from ..fs import DEFAULT_IO

        return QuiverStore(root, config, DEFAULT_IO, {}, None)


@contextlib.contextmanager
def progress_bar(total: int, show: bool) -> Iterator[Callable[[int], None] | None]:
    """A click progress bar on stderr measured in bytes, or nothing when hidden.

    Click draws the bar only on a terminal; elsewhere a forced ``--progress``
    prints just its label.
    """
    if not show:
        yield None
        return
    with click.progressbar(
        length=max(1, total), label="verifying", file=sys.stderr, show_pos=False,
        show_percent=True,
    ) as bar:  # fmt: skip
        yield bar.update


@click.command("fsck")
@store_arguments
@click.option(
    "--quarantine", is_flag=True, help="Move corrupt segments aside (counted in the report)."
)
@click.option("--strict", is_flag=True, help="Count warnings (torn WAL tails...) as problems.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar on stderr (default: when stderr is a terminal and not --json).",
)
def fsck(args: StoreArgs, quarantine: bool, strict: bool, progress: bool | None) -> None:
    """Verify every checksum of the store at PATH; exit 0 if healthy, 1 if not.

    Checks STORE, each partition's STATE and WAL files (read-only: a torn tail is
    reported, never cut), every segment's metadata and data, commit records and
    the subscribers' ack logs and checkpoints. Each problem names the file and
    byte offset. --quarantine moves corrupt segments to <pid>/quarantine/.
    """
    store = open_for_fsck(args)
    try:
        checker = StoreChecker(store, quarantine=quarantine)
        tasks = checker.plan()
        show = progress if progress is not None else (not args.as_json and stderr_is_tty())
        with progress_bar(sum(w for w, _ in tasks), show) as update:
            report = checker.run(tasks, update)
    finally:
        store.close()
    if args.as_json:
        emit_json(report.to_json(strict))
    else:
        click.echo(render_fsck(report, strict))
    raise SystemExit(EXIT_OK if report.healthy(strict) else EXIT_TROUBLE)


def render_fsck(report: FsckReport, strict: bool) -> str:
    """The human view of an :class:`FsckReport`."""
    c = report.checked
    out = [
        f"fsck {report.path}",
        f"  checked: STORE, {c['states']} partition states, {c['wal_files']} WAL files "
        f"({c['wal_records']} records, {human_bytes(c['wal_bytes'])}), {c['segments']} segments "
        f"({human_bytes(c['segment_bytes'])}), {c['commits']} commit records, "
        f"{c['subscriber_files']} subscriber files",
    ]
    for f in report.problems:
        out.append(f"PROBLEM {f.line()}")
    for f in report.warnings:
        out.append(f"WARNING {f.line()}")
    if report.quarantined:
        out.append(f"quarantined {report.quarantined} segment(s)")
    verdict = "healthy" if report.healthy(strict) else "UNHEALTHY"
    out.append(f"{verdict}: {len(report.problems)} problem(s), {len(report.warnings)} warning(s)")
    return "\n".join(out)
