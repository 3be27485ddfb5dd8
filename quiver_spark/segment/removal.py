"""What removing segments finds: the leftovers a partition's writer clears before it
writes (ARCHITECTURE.md §5.4), and the chosen segments retention finds already gone
when it checks before a delete (§15.1).

:func:`clean_partition` is the work of
:meth:`~quiver_spark.segment.catalog.SegmentLocation.cleanup` once the publication has
said whether unpublished ``.arrow`` files may go; :func:`log_vanished` reports what
:meth:`~quiver_spark.segment.catalog.SegmentLocation.check_before_delete` found gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from .. import layout
from ..config import validate_name
from ..errors import QuiverError
from ..seams import DeletedMarks
from .backend import SegmentBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanupReport:
    """What :meth:`SegmentLocation.cleanup` removed and the highest seq it saw on disk."""

    removed: list[str]
    max_seq_seen: int
    max_published_seq: int = 0
    """Highest seq that was ever published and still leaves a trace on disk: a
    ``.meta`` in the partition directory or any file in ``quarantine/``. Unpublished
    ``.arrow`` orphans do not count: no reader ever saw their seq."""
    highest_taken: int = 0
    """Highest seq the partition's writer must not use again: ``max_published_seq``
    when the unpublished ``.arrow`` files were removed (their seqs are free again),
    ``max_seq_seen`` when they were left (another holder's, §11.3)."""


def clean_partition(b: SegmentBackend, partition: str, *, unpublished: bool) -> CleanupReport:
    """Remove ``*.tmp`` files and (``unpublished``) unpublished ``.arrow`` files of
    ``partition`` through ``b``; report the highest seqs seen (:class:`CleanupReport`)."""
    validate_name("partition", partition)
    d = b.join(partition)
    names = list(b.entries(d))
    quarantined = list(b.entries(b.join(layout.quarantine_dir(partition))))
    published = {s for n in names if (s := layout.parse_segment_meta(n))}
    doomed = [
        f"{d}/{n}"
        for n in names
        if layout.is_tmp(n)
        or (unpublished and (s := layout.parse_segment_data(n)) is not None and s not in published)
    ]
    max_seq = max((layout.parse_segment_file_seq(n) or 0 for n in names + quarantined), default=0)
    max_published = max(
        [*published, *(layout.parse_segment_file_seq(n) or 0 for n in quarantined)], default=0
    )
    removed = [b.display(p) for p in b.remove_found(doomed)]
    if removed:
        log.info("quiver.segment.cleanup partition=%s removed=%s", partition, removed)
    return CleanupReport(
        removed=removed,
        max_seq_seen=max_seq,
        max_published_seq=max_published,
        highest_taken=max_published if unpublished else max_seq,
    )


def log_vanished(
    partition: str, seqs: list[int], recorded: Callable[[str], DeletedMarks] | None
) -> None:
    """``quiver.segment.vanished``: DEBUG for the seqs ``recorded`` holds (deleted by
    another retention pass first: nothing lost), WARNING for the others."""
    unknown = ""
    deleted: list[int] = []
    if recorded is not None:
        try:
            marks = recorded(partition)
        except (OSError, QuiverError) as e:
            unknown = f" (the ack log could not be read to tell: {e})"
        else:
            deleted = [s for s in seqs if marks.holds(s)]
    if deleted:
        log.debug(
            "quiver.segment.vanished partition=%s seqs=%s: already deleted by another "
            "retention pass (recorded in the ack log); nothing lost",
            partition,
            deleted,
        )
    lost = [s for s in seqs if s not in deleted]
    if lost:
        log.warning(
            "quiver.segment.vanished partition=%s seqs=%s: gone but never recorded deleted "
            "by retention (removed outside Quiver?); a subscriber that had not read them "
            "reports them lost%s",
            partition,
            lost,
            unknown,
        )
