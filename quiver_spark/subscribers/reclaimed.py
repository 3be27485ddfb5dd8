"""What retention reclaimed before a subscriber was registered, said once at its
registration (``quiver.subscriber.registered_late``).

Retention deletes a segment once every registered subscriber is done with it (§15.1),
so a subscriber registered later never sees what went before it: without a word it
would read 0 rows where another got thousands. The ack log's DELETED facts (§13.4) are
the count: only a retention pass writes them, for the segments it deletes, so each
partition's deleted set holds exactly the seqs reclaimed there (a seq never published,
moved aside or removed by hand is not in it).

Rows and time range: each partition's MANIFEST counts, in the write that drops their
entries, the segments retention deleted, their rows and ingestion times (§11.1,
``reclaimed``), from when it began counting (a MANIFEST written before the key
existed, or rebuilt from a listing, begins at zero). Retention records a seq deleted
in the ack log before its entry goes, so what a MANIFEST counted is among the seqs the
ack log records, provided the ack log is read again after the MANIFEST and has not
grown: then equal counts mean the rows and times are those of every reclaimed
segment, and a lower count those of some of them (the line says how many are not
recorded). Never a number the records do not give.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ..errors import QuiverError
from .state import RegistryState

log = logging.getLogger(__name__)

EVENT = "quiver.subscriber.registered_late"


class Recorded(Protocol):
    """What a partition's MANIFEST counted of retention's deletions (a
    :class:`~quiver_spark.control.manifest.ReclaimedTotals`)."""

    @property
    def segments(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def min_ingestion_ns(self) -> int | None: ...
    @property
    def max_ingestion_ns(self) -> int | None: ...


RecordedOf = Callable[[str], Recorded | None]
"""A partition's :class:`Recorded` totals (None: no MANIFEST, or one that cannot be
read); set on the registry by the store that opens it."""


def utc(ns: int) -> str:
    """``ns`` since the epoch as ISO 8601 UTC to the millisecond (rounded down).

    >>> utc(1_764_352_499_123_999_999)
    '2025-11-28T17:54:59.123Z'
    """
    t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ns // 1_000_000)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _totals(recs: list[Recorded]) -> tuple[int, int, int | None, int | None]:
    lows = [r.min_ingestion_ns for r in recs if r.min_ingestion_ns is not None]
    highs = [r.max_ingestion_ns for r in recs if r.max_ingestion_ns is not None]
    return (
        sum(r.segments for r in recs),
        sum(r.rows for r in recs),
        min(lows, default=None),
        max(highs, default=None),
    )


def _recorded_json(r: Recorded | None) -> dict[str, int | None] | None:
    if r is None:
        return None
    return {
        "segments": r.segments,
        "rows": r.rows,
        "min_ingestion_ns": r.min_ingestion_ns,
        "max_ingestion_ns": r.max_ingestion_ns,
    }


@dataclass(frozen=True)
class PartReclaimed:
    """One partition's segments reclaimed before the registration, and where the new
    subscriber starts there."""

    partition: str
    segments: int
    highest: int
    """The highest seq reclaimed."""
    starts_at: int
    """The first seq the subscriber has not done (acked, dropped or deleted)."""
    recorded: Recorded | None = None
    """What the partition's MANIFEST counted of these segments (between 1 and
    ``segments`` of them), None when it counted none."""

    @property
    def exact(self) -> bool:
        """Whether the rows and times of every one of these segments are recorded."""
        return self.recorded is not None and self.recorded.segments == self.segments

    def _where(self, rows: bool) -> str:
        out = f"{self.partition}: {self.segments} up to seq {self.highest}"
        if not rows:
            return out
        r = self.recorded
        if r is None:
            return f"{out}, rows not recorded"
        if self.exact:
            return f"{out}, {r.rows} rows"
        return f"{out}, {r.rows} rows of {r.segments} ({self.segments - r.segments} not recorded)"


@dataclass(frozen=True)
class Reclaimed:
    """Segments reclaimed before ``subscriber`` was registered, per partition."""

    subscriber: str
    parts: list[PartReclaimed] = field(default_factory=list)
    at_least: bool = False
    """The ack log was opened with salvage and skipped records: more may be gone."""

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.parts)

    @property
    def exact(self) -> bool:
        """Whether the rows and times of every reclaimed segment are recorded."""
        return all(p.exact for p in self.parts)

    def _summary(self) -> str:
        recs = [p.recorded for p in self.parts if p.recorded is not None]
        if not recs:
            return "rows and time range not recorded"
        segments, rows, lo, hi = _totals(recs)
        when = f"ingested {utc(lo)} to {utc(hi)}" if lo is not None and hi is not None else ""
        if self.exact:
            return f"{rows} rows {when}".rstrip()
        return (
            f"rows and time range of {self.segments - segments} not recorded; the other "
            f"{segments}: {rows} rows {when}".rstrip()
        )

    def line(self) -> str:
        """The one line a registration says (log and CLI)."""
        n = self.segments
        count = f"{'at least ' if self.at_least else ''}{n} segment{'s' if n != 1 else ''}"
        rows = any(p.recorded is not None for p in self.parts)
        where = "; ".join(p._where(rows) for p in self.parts)
        starts = ", ".join(f"{p.partition} seq {p.starts_at}" for p in self.parts)
        summary = self._summary()
        inner = f"{summary}; {where}" if rows else f"{where}; {summary}"
        return (
            f"{count} ({inner}) were reclaimed before "
            f"subscriber {self.subscriber} was registered; it starts at {starts}"
        )

    def as_json(self) -> dict[str, Any]:
        """The ``reclaimed_before`` object of ``quiver subscribers add --json``:
        ``rows`` and the ingestion range are those of every reclaimed segment, null
        unless all are recorded; each partition's ``recorded`` is what its MANIFEST
        counted (null: nothing)."""
        exact = self.exact
        _, rows, lo, hi = _totals([p.recorded for p in self.parts if p.recorded is not None])
        return {
            "segments": self.segments,
            "at_least": self.at_least,
            "rows": rows if exact else None,
            "min_ingestion_ns": lo if exact else None,
            "max_ingestion_ns": hi if exact else None,
            "partitions": {
                p.partition: {
                    "segments": p.segments,
                    "highest_seq": p.highest,
                    "starts_at": p.starts_at,
                    "recorded": _recorded_json(p.recorded),
                }
                for p in self.parts
            },
        }


def reclaimed_before(state: RegistryState, sub: str, *, at_least: bool = False) -> Reclaimed | None:
    """What the ack log in ``state`` records reclaimed, as seen by ``sub`` (registered
    in it); None when nothing was reclaimed in any partition."""
    sid = state.by_name.get(sub)
    if sid is None:
        return None
    parts = []
    for pid, dl in sorted(state.deleted.items(), key=lambda kv: state.parts.get(kv[0], "")):
        n = dl.hwm + len(dl.gaps)
        if not n:
            continue
        view = state.view(sid, pid)
        parts.append(
            PartReclaimed(
                partition=state.parts.get(pid, f"#{pid}"),
                segments=n,
                highest=max(dl.gaps) if dl.gaps else dl.hwm,
                starts_at=view.hwm + 1,
            )
        )
    return Reclaimed(sub, parts, at_least) if parts else None


def deleted_counts(state: RegistryState) -> dict[str, int]:
    """Per partition name, the seqs the ack log in ``state`` records deleted."""
    return {
        state.parts.get(pid, f"#{pid}"): dl.hwm + len(dl.gaps) for pid, dl in state.deleted.items()
    }


def with_recorded(
    late: Reclaimed, recorded: RecordedOf, recount: Callable[[], Mapping[str, int]]
) -> Reclaimed:
    """``late`` with each partition's MANIFEST totals (``recorded``) where they are
    known to count only segments ``late`` counts: ``recount()``, the ack log read
    again after the MANIFESTs, still holds that partition's count (a pass since would
    have grown it first), and the MANIFEST counted no more. Nothing for an ack log
    read with salvage (its count may be short), or when a MANIFEST cannot be read."""
    if late.at_least:
        return late
    got: dict[str, Recorded | None] = {}
    for p in late.parts:
        try:
            got[p.partition] = recorded(p.partition)
        except (OSError, QuiverError) as e:
            log.debug(
                "quiver.subscriber.reclaimed_rows_unread partition=%s error=%s", p.partition, e
            )
            got[p.partition] = None
    try:
        now = recount()
    except (OSError, QuiverError) as e:
        log.debug("quiver.subscriber.reclaimed_rows_unread error=%s", e)
        return late
    parts = []
    for p in late.parts:
        r = got[p.partition]
        if r is not None and 0 < r.segments <= p.segments and now.get(p.partition) == p.segments:
            p = replace(p, recorded=r)
        parts.append(p)
    return replace(late, parts=parts)
