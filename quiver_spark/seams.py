"""The typed seams between engine parts: what one part reads of another, as Protocols.

Each protocol names the concrete class that satisfies it; mypy checks every caller
against the protocol, so a method renamed on one side fails the type check instead
of a retention pass at run time. The parts meet here only by shape: this module
imports nothing of the engine.

- the ack log's record of deleted segments (§13.4 ``DELETED`` facts):
  :class:`DeletedMarks`, read through :class:`DeletedSegments`; the one answer to
  "did retention delete this seq" for recovery, the retained-segment index, retention
  and the reader's classification of a missing segment;
- what retention and its index read of the segment location: :class:`SegmentInfo`,
  :class:`DamagedInfo`, :class:`SegmentCatalog` and :class:`LocationCatalog`;
- what a retention pass and its gauges read and record in the subscribers' ack log:
  :class:`SubscriberNames`, :class:`RetentionView`, :class:`RetentionLedger`,
  :class:`LockedLedger` and :class:`GaugeSource`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol, runtime_checkable


class DeletedMarks(NamedTuple):
    """The seqs of one partition that retention recorded deleted: every seq up to
    ``floor``, and each seq in ``above`` (all greater than ``floor``).

    ``above`` may be the ack log's live set: read it, never change it. The facts only
    grow, so the same ``floor`` and number of seqs above it are the same facts.
    """

    floor: int
    above: AbstractSet[int]

    def holds(self, seq: int) -> bool:
        """True when retention recorded ``seq`` deleted."""
        return seq <= self.floor or seq in self.above

    @property
    def highest(self) -> int:
        """The highest seq recorded deleted (0 if none)."""
        return max(self.floor, max(self.above, default=0))

    @property
    def version(self) -> tuple[int, int]:
        """What identifies these facts (they only grow): ``(floor, len(above))``."""
        return self.floor, len(self.above)


NO_DELETIONS = DeletedMarks(0, frozenset())
"""The record of a partition nothing was deleted from."""


@runtime_checkable
class DeletedSegments(Protocol):
    """Where the deleted-segments fact is read (``SubscriberRegistry`` has this; so does
    ``QuiverStore``, which refreshes its registry first)."""

    def deleted_marks(self, partition: str) -> DeletedMarks: ...


@runtime_checkable
class SegmentInfo(Protocol):
    """What retention reads of a segment (``SegmentMeta`` has these, read-only)."""

    @property
    def partition(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def min_ingestion_ns(self) -> int: ...
    @property
    def max_ingestion_ns(self) -> int: ...


@runtime_checkable
class DamagedInfo(Protocol):
    """A published segment whose metadata is unreadable (``DamagedSegment`` has these)."""

    @property
    def partition(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def error(self) -> str: ...
    @property
    def size_bytes(self) -> int: ...


@runtime_checkable
class SurveyInfo(Protocol):
    """One partition's published segments: readable ones and damaged ones."""

    @property
    def metas(self) -> Sequence[SegmentInfo]: ...
    @property
    def damaged(self) -> Sequence[DamagedInfo]: ...


@runtime_checkable
class SegmentCatalog(Protocol):
    """The least retention needs of a segment store: list and delete."""

    def partitions(self) -> list[str]: ...

    def list(self, partition: str) -> Sequence[SegmentInfo]: ...

    def delete(self, partition: str, seqs: Iterable[int]) -> None: ...


@runtime_checkable
class LocationCatalog(SegmentCatalog, Protocol):
    """A catalog a long-lived index follows without listing (``SegmentLocation``):
    it goes on around damaged metadata (``survey``), finds new segments by probing
    the seqs after the highest one seen (``probe_next``), and tells when segments
    were moved aside (``quarantine_mark``)."""

    def survey(self, partition: str) -> SurveyInfo: ...

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None = None,
        *,
        entries: bool = False,
    ) -> Mapping[str, Sequence[SegmentInfo | DamagedInfo]]: ...

    def is_published(self, partition: str, seq: int) -> bool: ...

    def finish_deletes(self, partition: str, seqs: Iterable[int]) -> list[int]: ...

    def quarantine_mark(self) -> bytes | None: ...


@runtime_checkable
class RetentionView(DeletedSegments, Protocol):
    """What a retention plan reads of the subscribers (``SubscriberRegistry`` has this)."""

    def done_summary(self, partition: str) -> tuple[int, set[int]]: ...

    def undone_by(self, partition: str, seq: int) -> list[str]: ...


@runtime_checkable
class SubscriberNames(Protocol):
    """Who the ack log registers (``SubscriberRegistry`` has this)."""

    def subscribers(self) -> list[str]: ...


@runtime_checkable
class RetentionLedger(RetentionView, SubscriberNames, Protocol):
    """What a retention pass reads and records under the ack log's exclusive lock."""

    def done_count(self, sub: str) -> int: ...

    def condemn(
        self, deletions: Mapping[str, Sequence[int]]
    ) -> dict[str, dict[str, list[int]]]: ...


@runtime_checkable
class LockedLedger(Protocol):
    """The ack log a retention pass locks (``SubscriberRegistry`` has this)."""

    def exclusive(self) -> AbstractContextManager[RetentionLedger]: ...


@runtime_checkable
class GaugeSource(SubscriberNames, Protocol):
    """What the gauges read of the ack log (``SubscriberRegistry`` has this)."""

    def acklog_stats(self) -> Mapping[str, int]: ...

    def marks_table(self) -> Sequence[tuple[str, str, int, AbstractSet[int]]]: ...
