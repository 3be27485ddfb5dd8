"""Advisory files, which nothing correct depends on: ``readers/*.lock`` holder info,
``readers/*.lost.jsonl``, ``metrics/*.prom``, and the consumer leases
``readers/*.lease`` (checked as leases, :func:`~.control.check_lease`). Damage to any
but a lease is a warning.
"""

from __future__ import annotations

import json

from .. import layout
from ..metrics import parse_exposition
from .control import check_lease
from .report import FindingKind, FsckRun, Task


def advisory_tasks(run: FsckRun) -> list[Task]:
    """A task per advisory object under ``readers/`` and ``metrics/``."""
    tasks: list[Task] = []
    for key in run.keys(layout.readers_prefix()):
        if layout.is_live_lease(key):
            tasks.append((1, lambda key=key: check_lease(run, key)))  # type: ignore[misc]
        elif layout.is_live_lock(key):
            tasks.append((1, lambda key=key: _check_reader_lock(run, key)))  # type: ignore[misc]
        elif layout.is_lost_log(key):
            tasks.append((1, lambda key=key: _check_lost_log(run, key)))  # type: ignore[misc]
    for key in run.keys(layout.metrics_prefix()):
        if layout.is_metrics_file(key):
            tasks.append((1, lambda key=key: _check_metrics_file(run, key)))  # type: ignore[misc]
    return tasks


def _advisory(run: FsckRun, key: str) -> bytes | None:
    """An advisory object's bytes; None when it is gone (or unreadable: a warning)."""
    try:
        raw = run.read(key)
    except FileNotFoundError:
        return None
    except OSError as e:
        run.warning(FindingKind.ADVISORY, run.shown(key), f"cannot read: {e}")
        return None
    run.report.checked["advisory_files"] += 1
    return raw


def _check_reader_lock(run: FsckRun, key: str) -> None:
    raw = _advisory(run, key)
    if raw:
        lock_holder_info(run, run.shown(key), raw, FindingKind.READER_LOCK)


def lock_holder_info(
    run: FsckRun, path: str, raw: bytes, kind: FindingKind, pid: str | None = None
) -> None:
    try:
        info = json.loads(raw)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        run.warning(
            kind, path, f"holder info unreadable: {type(e).__name__} (advisory: the lock "
            "is the flock, not the content; the next holder rewrites it)", partition=pid,
        )  # fmt: skip


def _check_lost_log(run: FsckRun, key: str) -> None:
    """``readers/<subscriber>.lost.jsonl``: one JSON object a line (a torn last line
    is what a crash leaves); read by operators and ``Subscription.lost()`` only."""
    raw = _advisory(run, key)
    if raw is None:
        return
    path = run.shown(key)
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
                    run.warning(
                        FindingKind.LOST_LOG, path, "line is not a JSON object (advisory: readers "
                        "skip it; the segments it named are still counted by the ack log)",
                        offset=offset,
                    )  # fmt: skip
                    return
        offset += len(line) + 1


def _check_metrics_file(run: FsckRun, key: str) -> None:
    """``metrics/<instance>.prom``: advisory; its process restarts its counters from
    zero when it cannot read it back, and ``quiver metrics --all`` skips it."""
    raw = _advisory(run, key)
    if raw is None:
        return
    try:
        parse_exposition(raw)
    except ValueError as e:
        run.warning(
            FindingKind.METRICS, run.shown(key), f"{e} (advisory: its process restarts its "
            "counters from zero and rewrites it; quiver metrics --all skips it)",
        )  # fmt: skip
