"""A subscriber's acceptance horizon: data too old for its destination is dropped,
recorded, counted (ARCHITECTURE.md §19).

Loki, Mimir and Prometheus remote write accept old samples only within a window. A
consumer given a horizon ``h`` (``Subscription(horizon=...)``, the source option
``acceptanceHorizon``) does not deliver a segment whose newest row was ingested more
than ``h`` before its batch was planned: when a batch's end position is planned
(``next_batch_end``, Spark's ``latestOffset`` on the driver) it is stamped with
``cutoff_ns = now - h`` (the planning process's wall clock, epoch ns), and that one
number decides for every segment of the batch: ``max_ingestion_ns < cutoff_ns`` (the
``.meta``'s newest ingestion time, stamped by the writer's clock) is dropped, anything
else delivered. The cutoff travels in the end position (Spark's offset log), so a
replay of the batch decides exactly as the first run did, whatever the clock says
then. The acknowledgement of that position (``ack``, Spark's ``commit``) records the
dropped segments as ``dropped`` for the subscriber in the same durable ack-log write
as the delivered ones' ``ack``: retention treats both as done, and a restart never
delivers them.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..values import parse_duration

HORIZON_ALLOWED = (
    "a duration greater than zero such as 30m, 6h or 7d (units ms, s, m, h, d), or none "
    "(the default: every segment is delivered however old)"
)


def parse_horizon(value: object, option: str = "horizon") -> float | None:
    """A horizon in seconds (greater than zero), or None for ``None``/``none``/``""``
    (off). Anything else is one :class:`ConfigError` naming what is allowed."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, bool):
        raise ConfigError(option, value, HORIZON_ALLOWED)
    try:
        seconds = parse_duration(option, value)
    except (ConfigError, OverflowError):  # OverflowError: an int too large for a float
        raise ConfigError(option, value, HORIZON_ALLOWED) from None
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(option, value, HORIZON_ALLOWED)
    return seconds


def cutoff(now_ns: int, horizon_s: float) -> int:
    """The cutoff of a batch planned at ``now_ns``: rows ingested before it are past
    the horizon (never below 0: a horizon reaching before the epoch drops nothing, and
    one too long for a float of nanoseconds is never rounded)."""
    horizon_ns = horizon_s * 1e9
    return 0 if horizon_ns >= now_ns else now_ns - round(horizon_ns)


def past(max_ingestion_ns: int, cutoff_ns: int | None) -> bool:
    """True when a segment whose newest row was ingested at ``max_ingestion_ns`` is
    past the horizon of a batch with ``cutoff_ns`` (None: no horizon)."""
    return cutoff_ns is not None and max_ingestion_ns < cutoff_ns


__all__ = ["HORIZON_ALLOWED", "cutoff", "parse_horizon", "past"]
