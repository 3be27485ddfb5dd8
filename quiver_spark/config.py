"""Typed, validated configuration for the engine.

Frozen dataclasses validated in ``__post_init__``; strings are parsed elsewhere
(:mod:`quiver_spark.options`). Units are in the field names. The defaults of fields
that are options are the option table's (:mod:`quiver_spark.option_table`); the rest
are internal settings with no option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import option_table as o
from .errors import ConfigError, InvalidNameError
from .option_table import SizeCapPolicy

__all__ = [
    "NAME_RE",
    "GiB",
    "KiB",
    "MiB",
    "RetentionConfig",
    "SegmentConfig",
    "SizeCapPolicy",
    "StoreConfig",
    "WalConfig",
    "validate_name",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def validate_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a safe path component (``[A-Za-z0-9_.-]{1,64}``)."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or value in (".", ".."):
        raise InvalidNameError(kind, value)
    return value


def _positive(option: str, value: float, allowed: str = "a positive number") -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(option, value, allowed)


def _non_negative(option: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(option, value, "zero or a positive number")


ACK_CHECKPOINT_RECORDS = 100_000
"""By default, a subscriber checkpoint is written after this many ack-log records."""


@dataclass(frozen=True)
class WalConfig:
    """Write-ahead log settings.

    ``flush_interval_s`` is the group-fsync period of the background flusher; 0 means
    fsync inside every append. ``max_size_bytes`` caps the WAL of one partition:
    reaching it forces a finalize and, if that cannot free space, backpressure.
    ``path`` relocates the partitions' WAL and lock directories (local POSIX path).
    """

    flush_interval_s: float = o.WAL_FLUSH_INTERVAL_DEFAULT
    max_size_bytes: int = o.WAL_MAX_SIZE_DEFAULT
    file_size_bytes: int = 64 * MiB
    path: str | None = None

    def __post_init__(self) -> None:
        _non_negative(o.WAL_FLUSH_INTERVAL, self.flush_interval_s)
        _positive(o.WAL_MAX_SIZE, self.max_size_bytes, "a positive size such as 4GB")
        _positive("wal.file_size", self.file_size_bytes, "a positive size such as 64MB")
        if self.file_size_bytes > self.max_size_bytes:
            object.__setattr__(self, "file_size_bytes", self.max_size_bytes)


@dataclass(frozen=True)
class SegmentConfig:
    """Open-segment and finalized-segment settings.

    ``path`` is where finalized segments live: a local path, an object-store URL
    (obstore, as a root there) or any other fsspec URL (default ``<store>/segments``). ``event_time_column`` names an optional timestamp
    or integer column whose min/max each segment's metadata keeps.
    """

    target_size_bytes: int = o.SEGMENT_TARGET_SIZE_DEFAULT
    max_open_duration_s: float = o.SEGMENT_MAX_OPEN_DURATION_DEFAULT
    target_batch_rows: int = 10_000
    path: str | None = None
    event_time_column: str | None = None

    def __post_init__(self) -> None:
        _positive(o.SEGMENT_TARGET_SIZE, self.target_size_bytes, "a positive size such as 32MB")
        _positive(o.SEGMENT_MAX_OPEN_DURATION, self.max_open_duration_s, "a positive duration")
        _positive("segment.target_batch_rows", self.target_batch_rows, "a positive integer")


@dataclass(frozen=True)
class RetentionConfig:
    """Retention layers: steady state, time, size cap (see ARCHITECTURE.md, Retention)."""

    size_cap_bytes: int | None = o.RETENTION_SIZE_CAP_DEFAULT
    size_cap_policy: SizeCapPolicy = o.RETENTION_SIZE_CAP_POLICY_DEFAULT
    max_age_hours: float | None = o.RETENTION_MAX_AGE_DEFAULT
    steady_state_headroom_bytes: int = o.RETENTION_STEADY_STATE_HEADROOM_DEFAULT
    backpressure_timeout_s: float = o.RETENTION_BACKPRESSURE_TIMEOUT_DEFAULT

    def __post_init__(self) -> None:
        if self.size_cap_bytes is not None:
            _positive(o.RETENTION_SIZE_CAP, self.size_cap_bytes, "a positive size such as 500GB")
        if not isinstance(self.size_cap_policy, SizeCapPolicy):
            raise ConfigError(
                o.RETENTION_SIZE_CAP_POLICY,
                self.size_cap_policy,
                " | ".join(p.value for p in SizeCapPolicy),
            )
        if self.max_age_hours is not None:
            _positive(
                o.RETENTION_MAX_AGE,
                self.max_age_hours,
                "a positive duration such as 72h or 7d",
            )
        _non_negative(o.RETENTION_STEADY_STATE_HEADROOM, self.steady_state_headroom_bytes)
        _non_negative(o.RETENTION_BACKPRESSURE_TIMEOUT, self.backpressure_timeout_s)


@dataclass(frozen=True)
class StoreConfig:
    """Everything a store needs; the defaults are the documented defaults."""

    wal: WalConfig = field(default_factory=WalConfig)
    segment: SegmentConfig = field(default_factory=SegmentConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    salvage: bool = False
    """Opt-in: skip (and count) corrupt mid-log WAL records instead of refusing to open."""
    ack_checkpoint_records: int = ACK_CHECKPOINT_RECORDS
    """Write a subscriber checkpoint after this many ack-log records."""
    subscriber_expire_after_s: float | None = o.SUBSCRIBER_EXPIRE_AFTER_DEFAULT
    """Store policy: deregister a subscriber neither live nor acknowledging for this long."""
    lease_ttl_s: float = o.LEASE_TTL_DEFAULT
    """Object roots: this process's leases (writer, sealer, live consumer) are taken over
    once an observer saw them unrenewed this long (ARCHITECTURE.md §8.2)."""
    explicit: frozenset[str] = frozenset()
    """Option names given explicitly (by options, YAML or CLI), as opposed to defaults:
    an explicit option that contradicts the store's recorded policy is an error."""

    def __post_init__(self) -> None:
        _positive(o.LEASE_TTL, self.lease_ttl_s, "a positive duration")
        if self.subscriber_expire_after_s is not None:
            _positive(
                o.SUBSCRIBER_EXPIRE_AFTER, self.subscriber_expire_after_s, "a positive duration"
            )
