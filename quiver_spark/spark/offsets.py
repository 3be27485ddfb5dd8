"""Source offsets: an engine :class:`~quiver_spark.subscription.position.Position` as Spark's
checkpoint stores it, naming the store it was planned on (ARCHITECTURE.md §17)::

    {"v": 2, "store": "<store id>", "segments": {"p-0": 12, "p-1": 7}}

``store`` is the id in the root's STORE (§7.1). A query reading newest first
(``catchUpOrder=newest``, :mod:`quiver_spark.subscription.catchup`) writes version 3 while a
partition has a backlog, adding ``"backlog": {"<partition>": [lo, hi]}``, the seqs
below that partition's ``segments`` seq not read yet; an offset without one is
written as version 2, so a build that reads only 2 refuses a backlog it would skip.
A query with an acceptance horizon (``acceptanceHorizon``, :mod:`quiver_spark.subscription.horizon`)
writes version 4, adding ``"cutoff_ns"``: the segments of the batch ending there whose
newest row was ingested before it are recorded dropped, not read; a build that reads
only up to 3 refuses it instead of delivering them. Partition ids are host names and
segment seqs start at 1 in every store, so an offset read against another store would
look valid there and make the query acknowledge that store's segments without reading
them: :meth:`QuiverOffset.resumed_on` refuses it. An offset written before offsets named
their store (``"v": 1``, no ``store``) is accepted for whatever store the query reads.

>>> off = QuiverOffset(Position({"p-1": 3, "p-0": 5}), "a1")
>>> off.to_json()
{'v': 2, 'store': 'a1', 'segments': {'p-0': 5, 'p-1': 3}}
>>> QuiverOffset.from_json({"v": 1, "segments": {"p-0": 5}}).store is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ForeignCheckpointError, OffsetFormatError
from ..subscription.position import Position, backlog_of, cutoff_of

OFFSET_VERSION = 2
"""The ``v`` this build writes for a position without a backlog; it reads 1 (no store
named), 2 and 3."""
BACKLOG_VERSION = 3
"""The ``v`` of an offset with a backlog (newest first)."""
CUTOFF_VERSION = 4
"""The ``v`` of an offset with an acceptance horizon's ``cutoff_ns`` (a backlog too
or not)."""
UNNAMED_STORE_VERSION = 1
"""The ``v`` of offsets written before offsets named their store."""


@dataclass(frozen=True)
class QuiverOffset:
    """A source offset: where a query is (``position``) in which store (``store``).

    Attributes
    ----------
    position
        Per partition, the last segment seq included.
    store
        The id of the store the offset was planned on; None for a version-1 offset,
        which does not say.
    """

    position: Position
    store: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores (keys of ``segments`` sorted)."""
        if self.store is None:
            raise OffsetFormatError("an offset this build writes names its store")
        pos = self.position
        if pos.cutoff_ns is not None:
            out: dict[str, Any] = {"v": CUTOFF_VERSION, "store": self.store}
            out["segments"] = dict(pos.segments)
            if pos.backlog:
                out["backlog"] = {p: [lo, hi] for p, (lo, hi) in pos.backlog.items()}
            out["cutoff_ns"] = pos.cutoff_ns
            return out
        if not pos.backlog:
            return {"v": OFFSET_VERSION, "store": self.store, "segments": dict(pos.segments)}
        return {
            "v": BACKLOG_VERSION,
            "store": self.store,
            "segments": dict(pos.segments),
            "backlog": {p: [lo, hi] for p, (lo, hi) in pos.backlog.items()},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> QuiverOffset:
        """Parse and validate an offset dict coming back from Spark (version 1 to 4)."""
        if raw is None:
            return cls(Position({}), None)
        if not isinstance(raw, Mapping):
            raise OffsetFormatError(f"offset must be a JSON object, got {raw!r}")
        version = raw.get("v")
        if not isinstance(version, int) or isinstance(version, bool):
            raise OffsetFormatError(f"offset lacks an integer version 'v': {dict(raw)!r}")
        if version > CUTOFF_VERSION:
            raise OffsetFormatError(
                f"offset version {version} was written by a newer quiver_spark "
                f"(this one reads up to {CUTOFF_VERSION}); upgrade to resume this query"
            )
        if version < UNNAMED_STORE_VERSION:
            raise OffsetFormatError(f"offset version {version} is invalid")
        store = raw.get("store")
        if version > UNNAMED_STORE_VERSION and (not isinstance(store, str) or not store):
            raise OffsetFormatError(
                f"offset version {version} lacks the id of its store ('store'): {dict(raw)!r}"
            )
        segs = raw.get("segments")
        if not isinstance(segs, Mapping):
            raise OffsetFormatError(f"offset lacks a 'segments' object: {dict(raw)!r}")
        backlog = backlog_of(raw) if version >= BACKLOG_VERSION else {}
        if version == BACKLOG_VERSION and not backlog:
            raise OffsetFormatError(f"offset version {version} lacks its 'backlog': {dict(raw)!r}")
        return cls(
            Position(dict(segs), backlog, cutoff_of(raw, version >= CUTOFF_VERSION)),
            store if version > UNNAMED_STORE_VERSION else None,
        )

    def resumed_on(self, store: str, root: str) -> Position:
        """The position, for a query reading store ``store`` at ``root``;
        :class:`ForeignCheckpointError` when the offset names another store."""
        if self.store is not None and self.store != store:
            raise ForeignCheckpointError(
                f"quiver source: this query's checkpoint was written against store "
                f"{self.store}, but {root} is store {store}: resuming here would "
                f"acknowledge this store's segments up to the checkpoint's offsets "
                f"{dict(self.position.segments)} without reading them. Point the query at "
                f"the store its checkpoint was written against (id {self.store}), or "
                f"start it with a new checkpointLocation (it then starts at "
                f"startingPosition)",
                checkpoint_store=self.store,
                store=store,
            )
        return self.position


def offset_json(position: Position, store: str) -> dict[str, Any]:
    """``position`` in store ``store`` as Spark stores it."""
    return QuiverOffset(position, store).to_json()


__all__ = ["BACKLOG_VERSION", "CUTOFF_VERSION", "OFFSET_VERSION", "QuiverOffset", "offset_json"]
