"""Publication hints: what one listing tells a long-lived reader about every partition
of a segments location at once (ARCHITECTURE.md §12).

Before a segment is published (before its ``.meta`` on a POSIX root, before its
MANIFEST step on an object root) its writer creates an empty file
``~hints/<pid>.<seq:020d>.hint`` at the location's root, then removes the partition's
older hints it knows of. A hint only ever announces: it is written *before* the
publication, so a partition whose newest hint is below the next seq a reader waits
for has published nothing the reader has not seen, and one whose hint is at or above
it (or that has no hint: a store written before hints, a lost hint) is looked at
itself, as before. A writer that dies between its hint and its publication leaves a
hint above what is published: its partition is looked at by every poll until a later
publication (its successor's seqs start above) passes it; it never hides a row.

Every quarantine also replaces ``~hints/QUARANTINE`` (after the location's quarantine
mark, §5.4), so the same listing tells whether a segment was moved aside.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from .. import layout
from ..config import NAME_RE
from .backend import SegmentBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Look:
    """One listing of a location's hints."""

    partitions: list[str]
    """The partitions a reader looks at: those it last listed, and every hinted one."""
    mark: str | None
    """The version of ``~hints/QUARANTINE`` (None: nothing quarantined since hints)."""
    hints: dict[str, int]
    """Per partition, the highest seq a hint announces."""


def list_hints(backend: SegmentBackend) -> tuple[dict[str, int], str | None] | None:
    """``(hints, quarantine version)`` from one listing of ``~hints/``; None when the
    storage cannot list a level."""
    got = backend.level(backend.join(layout.hints_dir()), (layout.quarantine_hint(),))
    if got is None:
        return None
    hints: dict[str, int] = {}
    for name in got.files:
        parsed = layout.parse_hint_name(name)
        if parsed is not None and NAME_RE.fullmatch(parsed[0]):
            pid, seq = parsed
            hints[pid] = max(seq, hints.get(pid, 0))
    return hints, got.files.get(layout.quarantine_hint())


def hints_of(backend: SegmentBackend, partition: str) -> list[int]:
    """The seqs of ``partition``'s hints now (one listing); [] where there are none."""
    got = backend.level(backend.join(layout.hints_dir()))
    if got is None:
        return []
    out = []
    for name in got.files:
        parsed = layout.parse_hint_name(name)
        if parsed is not None and parsed[0] == partition:
            out.append(parsed[1])
    return sorted(out)


def announce(backend: SegmentBackend, partition: str, seq: int, older: list[int]) -> None:
    """Create ``partition``'s hint for ``seq`` (its failure fails the publication: it
    must not happen unannounced), then remove the ``older`` ones below it, best effort
    (a reader takes the highest; a leftover is removed by the next writer's first
    announcement)."""
    backend.makedirs(backend.join(layout.hints_dir()))
    path = backend.join(layout.hints_dir(), layout.hint_name(partition, seq))
    backend.put(path, lambda consume: None, atomic=False, replace=True)
    stale = [
        backend.join(layout.hints_dir(), layout.hint_name(partition, s)) for s in older if s < seq
    ]
    if stale:
        try:
            backend.remove(stale)
        except OSError as e:
            log.warning("quiver.segment.hint_left partition=%s error=%s", partition, e)


def note_quarantine(backend: SegmentBackend) -> None:
    """After a quarantine mark is replaced: ``~hints/QUARANTINE`` too (its version is
    what a reader's listing compares), best effort (a reader's full listing, every
    few minutes, finds a quarantine this missed)."""
    if not backend.lists_levels:
        return
    token = os.urandom(8)  # other bytes every time: an unversioned bucket's ETag changes
    path = backend.join(layout.hints_dir(), layout.quarantine_hint())
    try:
        backend.makedirs(backend.join(layout.hints_dir()))
        backend.put(
            path,
            lambda consume: consume(memoryview(token)),
            # quarantines may run concurrently
            tmp=backend.join(layout.hints_dir(), layout.quarantine_hint_tmp(token.hex())),
            replace=True,
        )
    except OSError as e:
        log.warning("quiver.segment.quarantine_hint_unwritten error=%s", e)
