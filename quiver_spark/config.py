"""Typed, validated configuration for the engine.

Frozen dataclasses validated in ``__post_init__``; strings are parsed elsewhere
(:mod:`quiver_spark.options`). Units are in the field names.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from .errors import ConfigError, InvalidNameError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def validate_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a safe path component (``[A-Za-z0-9_.-]{1,64}``)."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or value in (".", ".."):
        raise InvalidNameError(kind, value)
    return value


class SizeCapPolicy(enum.Enum):
    """What happens when the store is over ``retention.size_cap`` with nothing acked to evict."""

    BACKPRESSURE = "backpressure"
    DROP_OLDEST = "drop_oldest"


def _positive(option: str, value: float, allowed: str = "a positive number") -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(option, value, allowed)


def _non_negative(option: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(option, value, "zero or a positive number")


@dataclass(frozen=True)
class WalConfig:
    """Write-ahead log settings.

    ``flush_interval_s`` is the group-fsync period of the background flusher; 0 means
    fsync inside every append. ``max_size_bytes`` caps the WAL of one partition:
    reaching it forces a finalize and, if that cannot free space, backpressure.
    ``path`` relocates the partitions' WAL and lock directories (local POSIX path).
    """

    flush_interval_s: float = 0.025
    max_size_bytes: int = 4 * GiB
    file_size_bytes: int = 64 * MiB
    path: str | None = None

    def __post_init__(self) -> None:
        _non_negative("wal.flush_interval", self.flush_interval_s)
        _positive("wal.max_size", self.max_size_bytes, "a positive size such as 4GB")
        _positive("wal.file_size", self.file_size_bytes, "a positive size such as 64MB")
        if self.file_size_bytes > self.max_size_bytes:
            object.__setattr__(self, "file_size_bytes", self.max_size_bytes)


@dataclass(frozen=True)
class SegmentConfig:
    """Open-segment and finalized-segment settings.

    ``path`` is where finalized segments live: a local path or any fsspec URL
    (default ``<store>/segments``). ``event_time_column`` names an optional timestamp
    or integer column whose min/max each segment's metadata keeps.
    """

    target_size_bytes: int = 32 * MiB
    max_open_duration_s: float = 5.0
    target_batch_rows: int = 10_000
    path: str | None = None
    event_time_column: str | None = None

    def __post_init__(self) -> None:
        _positive("segment.target_size", self.target_size_bytes, "a positive size such as 32MB")
        _positive("segment.max_open_duration", self.max_open_duration_s, "a positive duration")
        _positive("segment.target_batch_rows", self.target_batch_rows, "a positive integer")


@dataclass(frozen=True)
class RetentionConfig:
    """Retention layers: steady state, time, size cap (see ARCHITECTURE.md, Retention)."""

    size_cap_bytes: int | None = None
    size_cap_policy: SizeCapPolicy = SizeCapPolicy.BACKPRESSURE
    max_retain_after_ingestion_hours: float | None = None
    steady_state_headroom_bytes: int = 0
    backpressure_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.size_cap_bytes is not None:
            _positive("retention.size_cap", self.size_cap_bytes, "a positive size such as 500GB")
        if not isinstance(self.size_cap_policy, SizeCapPolicy):
            raise ConfigError(
                "retention.size_cap_policy",
                self.size_cap_policy,
                " | ".join(p.value for p in SizeCapPolicy),
            )
        if self.max_retain_after_ingestion_hours is not None:
            _positive(
                "retention.max_age",
                self.max_retain_after_ingestion_hours,
                "a positive duration such as 72h or 7d",
            )
        _non_negative("retention.steady_state_headroom", self.steady_state_headroom_bytes)
        _non_negative("retention.backpressure_timeout", self.backpressure_timeout_s)


@dataclass(frozen=True)
class StoreConfig:
    """Everything a store needs; the defaults are the documented defaults."""

    wal: WalConfig = field(default_factory=WalConfig)
    segment: SegmentConfig = field(default_factory=SegmentConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    salvage: bool = False
    """Opt-in: skip (and count) corrupt mid-log WAL records instead of refusing to open."""
    ack_checkpoint_records: int = 100_000
    """Write a subscriber checkpoint after this many ack-log records."""
    subscriber_expire_after_s: float | None = None
    """Store policy: deregister a subscriber neither live nor acknowledging for this long."""
    explicit: frozenset[str] = frozenset()
    """Option names given explicitly (by options, YAML or CLI), as opposed to defaults:
    an explicit option that contradicts the store's recorded policy is an error."""

    def __post_init__(self) -> None:
        if self.subscriber_expire_after_s is not None:
            _positive(
                "subscriber.expire_after", self.subscriber_expire_after_s, "a positive duration"
            )
