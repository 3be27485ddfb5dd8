"""Each partition directory of this machine's WAL root: STATE, HEARTBEAT, the LOCK
holder info and every WAL file (ARCHITECTURE.md §4.2, §6.1, §6.2).

WAL files are scanned read-only through a memory map: a torn tail is a warning, left
for the partition's next writer to cut; a damaged record or a gap between files that
STATE's ``covered`` does not explain is a problem. On an object root a writer on
another machine keeps these files on its own disk: only this machine's are checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import format as fmt
from .. import layout
from ..config import NAME_RE
from ..errors import CorruptionError
from ..ranges import RangeSet
from ..wal import list_wal_files, scan_wal_file, wal_limits
from .advisory import lock_holder_info
from .report import FindingKind, FsckRun, Task
from .segments import has_segment_files


def wal_partitions(run: FsckRun) -> list[str]:
    """The partition directories of this machine's WAL root."""
    root = run.store.wal_root
    return [
        p
        for p in run.store.io.listdir(root)
        if NAME_RE.fullmatch(p) and os.path.isdir(os.path.join(root, p))
    ]


def partition_tasks(run: FsckRun, pid: str) -> list[Task]:
    """STATE, HEARTBEAT and LOCK holder info of partition ``pid``'s directory, each of
    its WAL files, and that they follow one another."""
    seen: dict[str, tuple[int, int | None]] = {}  # WAL file -> first seq, last seq
    root = run.store.wal_root
    tasks: list[Task] = [(1, lambda: _check_state(run, pid))]
    infos = list_wal_files(os.path.join(root, layout.wal_dir(pid)), run.store.io)
    limits = _wal_limits(run, pid)
    for i, info in enumerate(infos):
        last = i == len(infos) - 1
        upto = limits.get(info.first_seq)
        tasks.append((max(1, info.size), _wal_task(run, pid, info.path, last, upto, seen)))
    if len(infos) > 1:
        tasks.append((1, lambda: _check_wal_continuity(run, pid, [f.path for f in infos], seen)))
    return tasks


def _check_state(run: FsckRun, pid: str) -> None:
    io, root = run.store.io, run.store.wal_root
    state = os.path.join(root, layout.partition_state(pid))
    try:
        body = fmt.decode_frame(state, fmt.MAGIC_STATE, io.read_file(state))
        for key in ("next_seq", "covered"):
            if key not in body:
                raise CorruptionError(state, fmt.FRAME_SIZE, f"STATE lacks {key!r}")
        run.report.checked["states"] += 1
    except FileNotFoundError:  # a partition that never finalized has no STATE
        if has_segment_files(run, pid):
            run.warning(
                FindingKind.STATE, state, "missing while the partition has segments: its next "
                "writer starts above the highest segment seq on disk (a seq retention "
                "deleted from the top is not reused only if the ack log recorded it)",
                partition=pid,
            )  # fmt: skip
    except CorruptionError as e:
        run.corruption(FindingKind.STATE, e, partition=pid)
        run.report.checked["states"] += 1
    beat = os.path.join(root, layout.partition_heartbeat(pid))
    try:
        fmt.decode_frame(beat, fmt.MAGIC_HEARTBEAT, io.read_file(beat))
    except FileNotFoundError:
        pass
    except CorruptionError as e:
        run.warning(
            FindingKind.HEARTBEAT, e.path, f"{e.reason} (advisory file, rewritten by the writer)",
            offset=e.offset, partition=pid,
        )  # fmt: skip
    run.report.checked["advisory_files"] += 1
    _check_lock_info(run, os.path.join(root, layout.partition_lock(pid)), FindingKind.LOCK, pid)


def _check_lock_info(run: FsckRun, path: str, kind: FindingKind, pid: str | None = None) -> None:
    """A lock file's holder info: JSON, read only to name a holder (advisory)."""
    try:
        raw = run.store.io.read_file(path)
    except FileNotFoundError:
        return
    run.report.checked["advisory_files"] += 1
    if raw:  # empty: created, never held
        lock_holder_info(run, path, raw, kind, pid)


def _wal_limits(run: FsckRun, pid: str) -> dict[int, int]:
    """The WAL files STATE cuts after a failed write or fsync (§6.1 ``wal_limit``);
    none when STATE is missing or damaged (``_check_state`` reports that)."""
    state = os.path.join(run.store.wal_root, layout.partition_state(pid))
    try:
        body = fmt.decode_frame(state, fmt.MAGIC_STATE, run.store.io.read_file(state))
        return wal_limits(state, body)
    except (FileNotFoundError, CorruptionError):
        return {}


def _wal_task(
    run: FsckRun,
    pid: str,
    path: str,
    last: bool,
    upto: int | None,
    seen: dict[str, tuple[int, int | None]],
) -> Callable[[], None]:
    def work() -> None:
        try:
            scan = scan_wal_file(path, last=last, salvage=True, io=run.store.io, upto=upto)
        except FileNotFoundError:
            return  # truncated away by a live writer after it finalized
        except CorruptionError as e:
            run.corruption(FindingKind.WAL, e, partition=pid)
            return
        run.report.checked["wal_files"] += 1
        run.report.checked["wal_records"] += len(scan.records)
        run.report.checked["wal_bytes"] += scan.valid_bytes + scan.torn_bytes
        for offset, reason in scan.skipped:
            run.problem(FindingKind.WAL, path, reason, offset=offset, partition=pid)
        if scan.torn_bytes:
            run.warning(
                FindingKind.WAL_TORN_TAIL,
                path,
                f"torn tail of {scan.torn_bytes} bytes after the last whole record "
                "(left in place; the partition's next writer cuts it on open)",
                offset=scan.valid_bytes,
                partition=pid,
            )
        seen[path] = (scan.first_seq, scan.records[-1].seq if scan.records else None)

    return work


def _check_wal_continuity(
    run: FsckRun, pid: str, paths: list[str], seen: dict[str, tuple[int, int | None]]
) -> None:
    # A file deleted as unneeded may lie between two kept ones: its seqs went into
    # STATE's `covered` before the unlink, so a gap `covered` holds whole is no damage
    # (ARCHITECTURE.md §4.2, Rotation; recovery accepts exactly these). Without a
    # readable STATE (which _check_state reports) no gap is explained.
    state = os.path.join(run.store.wal_root, layout.partition_state(pid))
    try:
        body = fmt.decode_frame(state, fmt.MAGIC_STATE, run.store.io.read_file(state))
        covered = RangeSet(tuple(r) for r in body.get("covered") or [])
    except (OSError, CorruptionError, TypeError, ValueError):
        covered = RangeSet()
    expected: int | None = None
    for path in paths:
        got = seen.get(path)
        if got is None:
            expected = None
            continue
        first, last = got
        if expected is not None and first != expected:
            if first > expected and covered.covers(expected, first - 1):
                expected = last + 1 if last is not None else first
                continue
            why = (
                f"STATE's covered does not hold seqs {expected}..{first - 1}"
                if first > expected
                else "the files overlap"
            )
            run.problem(
                FindingKind.WAL, path, f"wal files not contiguous: expected first seq {expected}, "
                f"found {first} ({why})", offset=0, partition=pid,
            )  # fmt: skip
        expected = last + 1 if last is not None else first
