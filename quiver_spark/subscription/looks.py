"""One look per call: within a subscription's call (a trigger's ack and plan, a poll's
registration check, position and plan) the ack log is caught up and the segments
location's root listed at most once; each look is a request on an object root."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..segment import Look, SegmentLocation
from ..store import QuiverStore
from ..subscribers import SubscriberRegistry


@dataclass
class _Call:
    """What the call under way already looked at."""

    depth: int = 0
    refreshed: bool = False
    partitions: list[str] | None = None
    look: Look | None = None


class CallLooks:
    """The looks of one consumer's calls at ``registry`` and ``store``'s segments."""

    def __init__(self, store: QuiverStore, registry: SubscriberRegistry) -> None:
        self.store = store
        self.registry = registry
        self._call = _Call()

    @property
    def location(self) -> SegmentLocation:
        return self.store.segment_location

    @contextlib.contextmanager
    def one_call(self) -> Iterator[None]:
        """Within the block (and within every public call of the subscription, which
        opens one), the ack log is caught up and the partitions are listed at most
        once: what the first look found serves the rest of the call. A look that
        failed is made again by the next call."""
        c = self._call
        c.depth += 1
        try:
            yield
        finally:
            c.depth -= 1
            if c.depth == 0:
                c.refreshed, c.partitions, c.look = False, None, None

    def refresh(self) -> None:
        """Catch the ack log up, once per call."""
        c = self._call
        if c.depth and c.refreshed:
            return
        self.registry.refresh()
        c.refreshed = c.depth > 0

    def partitions(self) -> list[str]:
        """The store's partitions, listed once per call (by :meth:`look` where the
        location lists its root in one request: the same listing)."""
        c = self._call
        if c.depth and c.partitions is not None:
            return list(c.partitions)
        seen = self.look()
        parts = seen.partitions if seen is not None else self.store.partitions()
        if c.depth:
            c.partitions = parts
        return list(parts)

    def look(self) -> Look | None:
        """One listing of the segments location's root, once per call: the partitions,
        the quarantine mark's version and the publication hints (§12)."""
        c = self._call
        if c.depth and c.look is not None:
            return c.look
        seen = self.location.look()
        if c.depth:
            c.look = seen
            if seen is not None:
                c.partitions = seen.partitions
        return seen
