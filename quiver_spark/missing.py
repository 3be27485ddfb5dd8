"""Why a segment sequence number has no published segment (ARCHITECTURE.md §9a).

A partition's writer allocates segment seqs without gaps (an interrupted finalize
that never published reuses its seq), so every seq from 1 up to the highest one that
left a trace (published, quarantined, or recorded deleted in the ack log) was
published at some point. A reader that meets such a seq without a ``.meta``
classifies it here, from the ack log and the segment location only:

- ``deleted``: retention recorded its deletion (``DELETED``; every subscriber that
  had not acknowledged it got ``dropped``): expected, never data loss;
- ``quarantined``: a file for it is in ``<pid>/quarantine/`` (``quiver fsck
  --quarantine`` moved it there): data loss, the reason file is named;
- ``missing``: no trace at all: data loss.

Engine code only (no Spark): the Spark source calls :func:`evidence` and acts on the
:class:`MissingSegment` it gets, so the decision is testable without a JVM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .errors import SegmentMissingError
from .seams import NO_DELETIONS, DeletedSegments

DELETED = "deleted"
QUARANTINED = "quarantined"
MISSING = "missing"
CORRUPT = "corrupt"


class SegmentFacts(Protocol):
    """What the segment location knows (``SegmentLocation`` has this)."""

    def published_seqs(self, partition: str) -> list[int]: ...

    def quarantined(self, partition: str) -> dict[int, str]: ...

    def quarantine_note(self, partition: str, seq: int) -> str: ...


@dataclass(frozen=True)
class MissingSegment:
    """A seq of ``partition`` that was published and has no ``.meta`` now.

    ``kind`` is :data:`DELETED`, :data:`QUARANTINED` or :data:`MISSING`;
    ``evidence`` names the quarantine reason file, ``note`` is the reason it holds.
    """

    partition: str
    seq: int
    kind: str
    evidence: str | None = None
    note: str = ""

    @property
    def data_loss(self) -> bool:
        """True unless retention deleted it on purpose (recorded ``dropped``)."""
        return self.kind != DELETED

    def describe(self) -> str:
        """What happened, for an error message or a log line (the kind not repeated)."""
        if self.kind == DELETED:
            return "by retention (recorded dropped for subscribers that had not acked it)"
        if self.kind == QUARANTINED:
            why = f": {self.note}" if self.note else ""
            return f"moved aside by `quiver fsck --quarantine`, reason file {self.evidence}{why}"
        if self.kind == CORRUPT:
            where = f" ({self.evidence})" if self.evidence else ""
            return (
                f"fails verification{where}: {self.note}"
                if self.note
                else f"fails verification{where}"
            )
        return "published, then gone without a deletion record or a quarantine file"

    def error(self, hint: str = "") -> SegmentMissingError:
        """The error naming partition, seq, what happened and ``hint``."""
        more = f"; {hint}" if hint else ""
        return SegmentMissingError(
            self.partition,
            self.seq,
            f"{self.kind}: {self.describe()}{more}",
            kind=self.kind,
            evidence=self.evidence,
        )


@dataclass(frozen=True)
class PartitionEvidence:
    """One snapshot of what is known about the seqs of a partition."""

    partition: str
    published: frozenset[int]
    quarantined: dict[int, str]
    notes: dict[int, str]
    deleted: frozenset[int]  # recorded deleted above ``deleted_floor``
    deleted_floor: int  # every seq up to this one is recorded deleted
    max_deleted: int

    @property
    def highest(self) -> int:
        """The highest seq known to have been published (0 if none)."""
        return max([self.max_deleted, *self.published, *self.quarantined], default=0)

    def is_deleted(self, seq: int) -> bool:
        return seq <= self.deleted_floor or seq in self.deleted

    def classify(self, seq: int) -> MissingSegment | None:
        """None when ``seq`` is published; else why it is not (the caller knows or
        checked that it was published once: ``seq <= highest`` or a planned offset)."""
        if seq in self.published:
            return None
        if self.is_deleted(seq):
            return MissingSegment(self.partition, seq, DELETED)
        if seq in self.quarantined:
            return MissingSegment(
                self.partition, seq, QUARANTINED, self.quarantined[seq], self.notes.get(seq, "")
            )
        return MissingSegment(self.partition, seq, MISSING)

    def losses(self, lo: int = 1, hi: int | None = None) -> list[MissingSegment]:
        """Every seq in ``[lo, min(hi, highest)]`` that was published and is neither
        there nor deleted by retention (quarantined or missing), ascending.

        Walks only the holes between known seqs, so millions of deleted seqs cost
        nothing.
        """
        top = self.highest if hi is None else min(hi, self.highest)
        start = max(lo, self.deleted_floor + 1, 1)
        if top < start:
            return []
        known = sorted(s for s in self.published | self.deleted if start <= s <= top)
        out: list[MissingSegment] = []
        prev = start - 1
        for s in [*known, top + 1]:
            for seq in range(prev + 1, s):
                found = self.classify(seq)
                if found is not None and found.data_loss:
                    out.append(found)
            prev = s
        return out

    def first_unread(self) -> int:
        """The lowest seq a subscriber starting at the earliest position must meet:
        the first one that is published or lost (deleted ones before it are
        skipped); ``highest + 1`` when there is none."""
        lost = self.losses()
        return min([*self.published, *(m.seq for m in lost[:1])], default=self.highest + 1)


def evidence(
    location: SegmentFacts,
    registry: DeletedSegments | None,
    partition: str,
    *,
    published: Iterable[int] | None = None,
) -> PartitionEvidence:
    """Gather what is known about ``partition``'s seqs: one listing of the partition
    (unless ``published`` is given), one of its quarantine directory, the ack log."""
    seqs = frozenset(location.published_seqs(partition) if published is None else published)
    quarantined = location.quarantined(partition)
    notes = {s: location.quarantine_note(partition, s) for s in quarantined if s not in seqs}
    marks = registry.deleted_marks(partition) if registry else NO_DELETIONS
    floor, deleted, top = marks.floor, frozenset(marks.above), marks.highest
    return PartitionEvidence(
        partition=partition,
        published=seqs,
        quarantined=quarantined,
        notes=notes,
        deleted=deleted,
        deleted_floor=floor,
        max_deleted=top,
    )
