"""The clock every safety interval of a holder or an observer is measured by (§8.2).

A lease holder may act for at most its ttl after its last renewal, and an ack-log
appender checks a checkpoint when its append took half the deletion horizon (§13.7):
both measure how much *real* time passed. ``time.monotonic`` (Linux
``CLOCK_MONOTONIC``) does not advance while the machine is suspended (a hibernated or
paused VM), so a holder resumed after a long suspend would believe its lease still
fresh and act after it moved. ``CLOCK_BOOTTIME`` counts the suspended time too and is
monotonic like it; where the platform lacks it, ``time.monotonic`` is the fallback.
Intervals only: no reading of it is ever compared across processes.
"""

from __future__ import annotations

import time

_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _boottime() -> float:
    assert _BOOTTIME is not None
    return time.clock_gettime(_BOOTTIME)


elapsed = _boottime if _BOOTTIME is not None else time.monotonic
"""Seconds since an arbitrary point, counting time the machine was suspended."""
