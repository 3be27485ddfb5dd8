"""The storage's clock: "now" as the root's storage tells time (ARCHITECTURE.md §13.8).

A decision that weighs how long ago an object was written (subscriber expiry) must
not compare a time another machine's wall clock wrote into the object with this
machine's wall clock: two clocks, and either may be hours off. It compares instead two
times the storage stamped itself: the object's ``modified_ns`` (S3's Last-Modified, a
POSIX root's mtime) and the ``modified_ns`` of an object this process has just written,
the *probe*. One clock, the storage's; no client's clock enters.

:class:`StorageClock` writes the probe (an empty object, unconditional ``put``), reads
its ``modified_ns`` back (one ``HEAD``) and, between probes, advances that reading by
this process's monotonic clock from the moment the answer arrived: the storage stamped
the probe before then, so the estimate is never ahead of the storage's clock (bar
drift, which a probe every :data:`PROBE_PERIOD_S` bounds). A decision that acts (an
expiry) asks for a fresh probe first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import StorageClockUnknown
from .base import ObjectStore
from .writes import retry_conflicts

PROBE_PERIOD_S = 60.0
"""The longest this process goes on estimating the storage's clock without a probe."""

RESOLUTION_NS = 2 * 10**9
"""What a comparison of two storage times allows for: S3 reports Last-Modified in
whole seconds, and may stamp a write at its request's start. A decision that needs an
interval of at least ``D`` by the storage's clock waits for ``D + RESOLUTION_NS``."""


class StorageClock:
    """The storage's "now" for one store handle (see the module docstring)."""

    def __init__(
        self,
        objects: ObjectStore,
        key: str,
        *,
        mono_ns: Callable[[], int] = time.monotonic_ns,
        period_s: float = PROBE_PERIOD_S,
    ) -> None:
        self.objects = objects
        self.key = key
        self._mono = mono_ns
        self._period_ns = int(period_s * 10**9)
        self._probed: tuple[int, int] | None = None  # (storage ns, monotonic ns after)

    def probe(self) -> int:
        """Write the probe and read back when the storage says it was written (two
        requests); raises ``OSError`` (:class:`StorageClockUnknown` when the storage
        reports no time)."""
        retry_conflicts(lambda: self.objects.put(self.key, b""))
        info = self.objects.info(self.key)
        after = self._mono()
        if info is None or info.modified_ns is None:
            shown = self.objects.display(self.key)
            raise StorageClockUnknown(
                shown,
                f"{shown}: the storage reports no modification "
                "time, so no interval can be measured on its clock",
            )
        self._probed = (info.modified_ns, after)
        return info.modified_ns

    def now_ns(self, *, fresh: bool = False) -> int:
        """The storage's clock now, never ahead of it: a new probe when ``fresh``, when
        none was made yet or when the last is :data:`PROBE_PERIOD_S` old; else the last
        probe advanced by this process's monotonic clock."""
        probed = self._probed
        if fresh or probed is None or self._mono() - probed[1] >= self._period_ns:
            return self.probe()
        return probed[0] + (self._mono() - probed[1])
