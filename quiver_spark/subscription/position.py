"""Positions in a store: which finalized segments a consumer has reached.

A position is the Spark source's offset (ARCHITECTURE.md §17) and the unit of the
engine's subscription API (:mod:`quiver_spark.subscription`).

A Quiver source offset names, for every store partition, the sequence number of the
last finalized segment the query has planned up to (inclusive). The micro-batch that
goes from offset ``start`` to offset ``end`` reads, in every partition ``p``, the
segments with ``start[p] < seq <= end[p]`` (with a ``backlog``, below: the seqs ``end``
includes and ``start`` does not); a partition absent from ``start`` reads from seq 1. Segments are immutable and seqs are never reused, so the rows of a batch are a
pure function of ``(start, end)``: a replay after a crash reads the same rows.

JSON format (:meth:`Position.to_json`; the Spark source stores it in
``<checkpoint>/offsets/<batch>`` as version 2, which adds the id of the store,
:mod:`quiver_spark.spark.offsets`)::

    {"v": 1, "segments": {"p-0": 12, "p-1": 7}}

``v``
    Format version, an integer. This build writes 1 (2 when there is a ``backlog``,
    3 when there is a ``cutoff_ns``) and reads 1 to 3; an offset with a higher version is refused with a clear error
    (written by a newer quiver_spark).
``segments``
    Map of partition id (``[A-Za-z0-9_.-]{1,64}``) to the last segment seq included,
    an integer >= 0 (0: nothing of that partition yet). Keys are sorted on output so
    equal offsets serialize identically.

``backlog`` (version 2, written only when a partition has one)
    Map of partition id to ``[lo, hi]``, the one range of seqs below that partition's
    ``segments`` seq not yet included: a consumer reading newest first
    (:mod:`quiver_spark.subscription.catchup`) served the newest segments before them. The included
    seqs of a partition are ``1..segments[p]`` minus ``lo..hi``; an offset without a
    backlog is written as version 1, byte for byte as before.

``cutoff_ns`` (version 3, written only with an acceptance horizon)
    Epoch nanoseconds: a segment of the batch ending at this offset whose newest row
    was ingested before it is recorded ``dropped`` instead of delivered
    (:mod:`quiver_spark.subscription.horizon`). Version 3 may hold a ``backlog`` too.

Future versions may add keys (readers of version 1 ignore none: any change that old
readers must not misread bumps ``v``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import NAME_RE
from ..errors import OffsetFormatError

OFFSET_VERSION = 3
"""The highest ``v`` this build reads; it writes 1 unless the position has a backlog
(2) or a horizon's cutoff (3)."""


@dataclass(frozen=True)
class Position:
    """An immutable source offset: partition -> last included segment seq.

    Attributes
    ----------
    segments
        Partition id to the highest segment sequence number included (inclusive).
    """

    segments: Mapping[str, int] = field(default_factory=dict)
    backlog: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per partition, the inclusive range ``(lo, hi)`` below its seq not yet included
    (newest first, :mod:`quiver_spark.subscription.catchup`); empty for an oldest-first position."""
    cutoff_ns: int | None = None
    """With an acceptance horizon (:mod:`quiver_spark.subscription.horizon`): the epoch ns before
    which a segment's newest row was ingested for the batch ending here to drop it
    instead of delivering it; decided once when this position was planned, so a replay
    decides the same. None: no horizon."""

    def __post_init__(self) -> None:
        clean: dict[str, int] = {}
        for p, s in self.segments.items():
            if not isinstance(p, str) or not NAME_RE.fullmatch(p) or p in (".", ".."):
                raise OffsetFormatError(f"offset names an invalid partition id {p!r}")
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise OffsetFormatError(
                    f"offset seq for partition {p!r} must be an int >= 0: {s!r}"
                )
            clean[p] = s
        object.__setattr__(self, "segments", dict(sorted(clean.items())))
        gaps: dict[str, tuple[int, int]] = {}
        for p, span in self.backlog.items():
            lo, hi = _span(p, span)
            if not 1 <= lo <= hi < clean.get(p, 0):
                raise OffsetFormatError(
                    f"offset backlog of partition {p!r} must lie below its seq "
                    f"{clean.get(p, 0)}: {span!r}"
                )
            gaps[p] = (lo, hi)
        object.__setattr__(self, "backlog", dict(sorted(gaps.items())))
        cut = self.cutoff_ns
        if cut is not None and (not isinstance(cut, int) or isinstance(cut, bool) or cut < 0):
            raise OffsetFormatError(f"offset cutoff_ns must be an int >= 0: {cut!r}")

    # -- conversion -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores (see the module docstring)."""
        if self.cutoff_ns is not None:
            out: dict[str, Any] = {"v": 3, "segments": dict(self.segments)}
            if self.backlog:
                out["backlog"] = {p: [lo, hi] for p, (lo, hi) in self.backlog.items()}
            out["cutoff_ns"] = self.cutoff_ns
            return out
        if not self.backlog:
            return {"v": 1, "segments": dict(self.segments)}
        return {
            "v": 2,
            "segments": dict(self.segments),
            "backlog": {p: [lo, hi] for p, (lo, hi) in self.backlog.items()},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Position:
        """Parse and validate an offset dict coming back from Spark."""
        if raw is None:
            return cls({})
        if not isinstance(raw, Mapping):
            raise OffsetFormatError(f"offset must be a JSON object, got {raw!r}")
        version = raw.get("v")
        if not isinstance(version, int) or isinstance(version, bool):
            raise OffsetFormatError(f"offset lacks an integer version 'v': {dict(raw)!r}")
        if version > OFFSET_VERSION:
            raise OffsetFormatError(
                f"offset version {version} was written by a newer quiver_spark "
                f"(this one reads up to {OFFSET_VERSION}); upgrade to resume this query"
            )
        if version < 1:
            raise OffsetFormatError(f"offset version {version} is invalid")
        segs = raw.get("segments")
        if not isinstance(segs, Mapping):
            raise OffsetFormatError(f"offset lacks a 'segments' object: {dict(raw)!r}")
        return cls(
            dict(segs), backlog_of(raw) if version >= 2 else {}, cutoff_of(raw, version >= 3)
        )

    # -- arithmetic -------------------------------------------------------------------
    def get(self, partition: str) -> int:
        """Last included seq of ``partition`` (0 when the partition is absent)."""
        return self.segments.get(partition, 0)

    def low(self, partition: str) -> int:
        """The highest seq through which everything of ``partition`` is included."""
        span = self.backlog.get(partition)
        return span[0] - 1 if span else self.get(partition)

    def floor(self) -> Position:
        """Per partition, :meth:`low`: the position without its backlog."""
        return Position({p: self.low(p) for p in self.segments})

    def included(self, partition: str) -> int:
        """How many seqs of ``partition`` this position includes."""
        lo, hi = self.backlog.get(partition, (1, 0))
        return self.get(partition) - (hi - lo + 1)

    def merged(self, updates: Mapping[str, int]) -> Position:
        """A copy with ``updates`` applied (seqs never move backwards); only for a
        position without a backlog."""
        out = dict(self.segments)
        for p, s in updates.items():
            out[p] = max(out.get(p, 0), s)
        return Position(out)

    def ranges(self, end: Position) -> dict[str, tuple[int, int]]:
        """Per partition, the inclusive seq range ``(lo, hi)`` from ``self`` to ``end``
        (positions without a backlog; :func:`quiver_spark.subscription.catchup.batch_spans` is the
        general form).

        Partitions with nothing new are left out.
        """
        out: dict[str, tuple[int, int]] = {}
        for p, hi in end.segments.items():
            lo = self.get(p) + 1
            if hi >= lo:
                out[p] = (lo, hi)
        return out

    def covers(self, partition: str, seq: int) -> bool:
        """True when ``seq`` of ``partition`` is included (at or below this offset and
        outside its backlog)."""
        span = self.backlog.get(partition)
        if span is not None and span[0] <= seq <= span[1]:
            return False
        return seq <= self.get(partition)

    def is_after(self, other: Position) -> bool:
        """True when some partition includes more seqs than in ``other``."""
        return any(self.included(p) > other.included(p) for p in self.segments)

    @staticmethod
    def union_partitions(offsets: Iterable[Position]) -> list[str]:
        """Sorted partition ids named by any of ``offsets``."""
        return sorted({p for o in offsets for p in o.segments})


def _span(partition: str, span: object) -> tuple[int, int]:
    if (
        isinstance(span, (list, tuple))
        and len(span) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
    ):
        return int(span[0]), int(span[1])
    raise OffsetFormatError(
        f"offset backlog of partition {partition!r} must be [lo, hi] integers: {span!r}"
    )


def backlog_of(raw: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """The ``backlog`` map of an offset dict (empty when absent), validated."""
    found = raw.get("backlog", {})
    if not isinstance(found, Mapping):
        raise OffsetFormatError(f"offset's 'backlog' must be an object: {dict(raw)!r}")
    return {p: _span(p, span) for p, span in found.items()}


def cutoff_of(raw: Mapping[str, Any], required: bool) -> int | None:
    """The ``cutoff_ns`` of an offset dict whose version has one (``required``)."""
    if not required:
        return None
    cut = raw.get("cutoff_ns")
    if not isinstance(cut, int) or isinstance(cut, bool) or cut < 0:
        raise OffsetFormatError(f"offset lacks an integer 'cutoff_ns' >= 0: {dict(raw)!r}")
    return cut
