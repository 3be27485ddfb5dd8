"""Positions in a store: which finalized segments a consumer has reached.

A position is the Spark source's offset (ARCHITECTURE.md §9a) and the unit of the
engine's subscription API (:mod:`quiver_spark.subscription`).

A Quiver source offset names, for every store partition, the sequence number of the
last finalized segment the query has planned up to (inclusive). The micro-batch that
goes from offset ``start`` to offset ``end`` reads, in every partition ``p``, the
segments with ``start[p] < seq <= end[p]``; a partition absent from ``start`` reads from
seq 1. Segments are immutable and seqs are never reused, so the rows of a batch are a
pure function of ``(start, end)``: a replay after a crash reads the same rows.

JSON format (:meth:`Position.to_json`; the Spark source stores it in
``<checkpoint>/offsets/<batch>`` as version 2, which adds the id of the store,
:mod:`quiver_spark.spark.offsets`)::

    {"v": 1, "segments": {"p-0": 12, "p-1": 7}}

``v``
    Format version, an integer. This build writes 1 and reads 1; an offset with a
    higher version is refused with a clear error (written by a newer quiver_spark).
``segments``
    Map of partition id (``[A-Za-z0-9_.-]{1,64}``) to the last segment seq included,
    an integer >= 0 (0: nothing of that partition yet). Keys are sorted on output so
    equal offsets serialize identically.

Future versions may add keys (readers of version 1 ignore none: any change that old
readers must not misread bumps ``v``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import NAME_RE
from .errors import OffsetFormatError

OFFSET_VERSION = 1


@dataclass(frozen=True)
class Position:
    """An immutable source offset: partition -> last included segment seq.

    Attributes
    ----------
    segments
        Partition id to the highest segment sequence number included (inclusive).
    """

    segments: Mapping[str, int] = field(default_factory=dict)

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

    # -- conversion -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores (see the module docstring)."""
        return {"v": OFFSET_VERSION, "segments": dict(self.segments)}

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
        return cls(dict(segs))

    # -- arithmetic -------------------------------------------------------------------
    def get(self, partition: str) -> int:
        """Last included seq of ``partition`` (0 when the partition is absent)."""
        return self.segments.get(partition, 0)

    def merged(self, updates: Mapping[str, int]) -> Position:
        """A copy with ``updates`` applied (seqs never move backwards)."""
        out = dict(self.segments)
        for p, s in updates.items():
            out[p] = max(out.get(p, 0), s)
        return Position(out)

    def ranges(self, end: Position) -> dict[str, tuple[int, int]]:
        """Per partition, the inclusive seq range ``(lo, hi)`` from ``self`` to ``end``.

        Partitions with nothing new are left out.
        """
        out: dict[str, tuple[int, int]] = {}
        for p, hi in end.segments.items():
            lo = self.get(p) + 1
            if hi >= lo:
                out[p] = (lo, hi)
        return out

    def covers(self, partition: str, seq: int) -> bool:
        """True when ``seq`` of ``partition`` is at or below this offset."""
        return seq <= self.get(partition)

    def is_after(self, other: Position) -> bool:
        """True when some partition is strictly ahead of ``other``."""
        return any(s > other.get(p) for p, s in self.segments.items())

    @staticmethod
    def union_partitions(offsets: Iterable[Position]) -> list[str]:
        """Sorted partition ids named by any of ``offsets``."""
        return sorted({p for o in offsets for p in o.segments})
