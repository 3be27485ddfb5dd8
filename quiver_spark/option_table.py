"""The table of store options: each option once, with its name, default, parser and meaning.

Every other place reads an option from here: the typed defaults of the config
dataclasses (:mod:`quiver_spark.config`) are the table's defaults parsed
(``NAME`` / ``NAME_DEFAULT`` pairs), string options are parsed by the table's
parsers (:func:`quiver_spark.options.store_config_from_options`), and README's sink
options table is generated from it (checked by tests/engine/test_options_table.py).
Changing a default is one edit here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .values import given, parse_choice, parse_duration, parse_size


class SizeCapPolicy(enum.Enum):
    """What happens when the store is over ``retention.size_cap`` with nothing acked to evict."""

    BACKPRESSURE = "backpressure"
    DROP_OLDEST = "drop_oldest"


Parser = Callable[[str, object], Any]
"""``(the option's name as given, its value) -> typed value``; errors name both."""


@dataclass(frozen=True)
class Option:
    """One documented option: its name, default as shown and meaning.

    Naming scheme: store options are dotted snake_case grouped by what they configure
    (``segment.*``, ``wal.*``, ``retention.*``, ``subscriber.*``); reader options are
    Spark-style camelCase like Kafka's and Delta's (``maxSegmentsPerTrigger``). Each
    option has one name: any other spelling is an unknown option.

    ``parse`` turns a value of the option into its typed value (None: the option is
    not a setting, such as ``path``). A default shown as ``none`` or as
    ``<another option>/...`` (derived from another option) has the typed default None.
    """

    name: str
    default: str
    help: str
    parse: Parser | None = None

    @property
    def typed_default(self) -> Any:
        """The default as the config dataclasses hold it."""
        if self.parse is None or not given(self.default) or self.default.startswith("<"):
            return None
        return self.parse(self.name, self.default)

    def value(self, value: object, as_given: str | None = None) -> Any:
        """``value`` of this option parsed (errors name it ``as_given``); None: the default."""
        if value is None or self.parse is None:
            return self.typed_default
        return self.parse(as_given or self.name, value)


def _positive(parse: Parser, allowed: str) -> Parser:
    def parse_positive(option: str, value: object) -> Any:
        parsed = parse(option, value)
        if parsed <= 0:
            raise ConfigError(option, value, allowed)
        return parsed

    return parse_positive


def _optional(parse: Parser) -> Parser:
    """``parse``, with an absent value (``none``, empty) meaning None."""

    def parse_optional(option: str, value: object) -> Any:
        return parse(option, value) if given(value) else None

    return parse_optional


def _text(option: str, value: object) -> str | None:
    text = str(value).strip()
    return text or None


def _size_cap_policy(option: str, value: object) -> SizeCapPolicy:
    return SizeCapPolicy(parse_choice(option, value, [p.value for p in SizeCapPolicy]))


def parse_max_age_hours(option: str, value: object) -> float | None:
    """``retention.max_age`` in hours: a duration with a unit (``72h``, ``7d``); a bare
    number is refused, being ambiguous between hours and seconds."""
    if not given(value):
        return None
    text = str(value).strip()
    allowed = "a positive duration with a unit, such as 72h or 7d"
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        raise ConfigError(option, value, allowed + " (a bare number is ambiguous)")
    hours = parse_duration(option, text) / 3600
    if not hours > 0 or hours == float("inf"):
        raise ConfigError(option, value, allowed)
    return hours


GREATER_THAN_ZERO = "a value greater than zero"

PATH = "path"
CONFIG = "config"
SEGMENT_TARGET_SIZE = "segment.target_size"
SEGMENT_MAX_OPEN_DURATION = "segment.max_open_duration"
SEGMENT_PATH = "segment.path"
SEGMENT_EVENT_TIME_COLUMN = "segment.event_time_column"
WAL_FLUSH_INTERVAL = "wal.flush_interval"
WAL_MAX_SIZE = "wal.max_size"
WAL_PATH = "wal.path"
RETENTION_SIZE_CAP = "retention.size_cap"
RETENTION_SIZE_CAP_POLICY = "retention.size_cap_policy"
RETENTION_MAX_AGE = "retention.max_age"
RETENTION_STEADY_STATE_HEADROOM = "retention.steady_state_headroom"
RETENTION_BACKPRESSURE_TIMEOUT = "retention.backpressure_timeout"
SUBSCRIBER_EXPIRE_AFTER = "subscriber.expire_after"
LEASE_TTL = "lease.ttl"

# The one table of store options: parsing, defaults, `quiver` -o flags, errors and the
# README's sink options table all come from it.
STORE_OPTION_TABLE: tuple[Option, ...] = (
    Option(PATH, "required", "the store's root directory (a local POSIX path reachable by "
           "writers and the driver)"),
    Option(SEGMENT_TARGET_SIZE, "32MB", "finalize the open segment at this many bytes",
           parse=_positive(parse_size, GREATER_THAN_ZERO)),
    Option(SEGMENT_MAX_OPEN_DURATION, "5s", "finalize an open segment at this age even when "
           "the stream is idle: the bound on commit-to-visible latency",
           parse=_positive(parse_duration, GREATER_THAN_ZERO)),
    Option(SEGMENT_PATH, "<path>/segments", "where finalized segments live: a local path, a "
           "bucket (`s3://bucket/prefix`, `gs://`, `az://`: the root's client and `storage.*` "
           "options) or any other fsspec URL (`hdfs://`...); recorded at creation", parse=_text),
    Option(SEGMENT_EVENT_TIME_COLUMN, "none", "a timestamp, date or integer column whose "
           "min/max each segment keeps (batch reads prune on it)", parse=_text),
    Option(WAL_FLUSH_INTERVAL, "25ms", "group-fsync period of the WAL; `0` fsyncs every "
           "append", parse=parse_duration),
    Option(WAL_MAX_SIZE, "4GB", "WAL cap per partition: reaching it finalizes; if undecided "
           "batches still pin it, backpressure", parse=_positive(parse_size, GREATER_THAN_ZERO)),
    Option(WAL_PATH, "<path>/partitions", "executor-local root for WAL and lock files; "
           "recorded at creation (see Layouts)", parse=_text),
    Option(RETENTION_SIZE_CAP, "none", "store policy: cap on WAL + segments of the whole "
           "store", parse=_optional(_positive(parse_size, "a size greater than zero"))),
    Option(RETENTION_SIZE_CAP_POLICY, "backpressure", "store policy: `backpressure` (never "
           "delete unacknowledged data; throttle intake) or `drop_oldest` (evict the oldest "
           "unacknowledged segments, recorded as `dropped`)", parse=_size_cap_policy),
    Option(RETENTION_MAX_AGE, "none", "store policy: delete segments ingested longer ago "
           "than this duration (`72h`, `7d`), acknowledged or not (recorded as `dropped`)",
           parse=parse_max_age_hours),
    Option(RETENTION_STEADY_STATE_HEADROOM, "0B", "store policy: keep this many bytes of "
           "fully acknowledged segments as a spool", parse=parse_size),
    Option(RETENTION_BACKPRESSURE_TIMEOUT, "30s", "how long an append waits for space "
           "before failing with a retryable error (this process's setting, not store policy)",
           parse=parse_duration),
    Option(SUBSCRIBER_EXPIRE_AFTER, "none", "store policy: deregister a subscriber that has "
           "not acknowledged for this long, releasing what it pinned",
           parse=_optional(_positive(parse_duration, "a duration greater than zero"))),
    Option(LEASE_TTL, "30s", "object roots: a writer's, sealer's or live consumer's lease "
           "is taken over once seen unrenewed this long (renewed every third of it); keep it "
           "above the longest pause a process may take (this process's setting)",
           parse=_positive(parse_duration, GREATER_THAN_ZERO)),
    Option(
        CONFIG,
        "$QUIVER_CONFIG",
        "a store profile: a YAML file in the layout of conf/quiver.yaml, store options "
        "and a `storage:` section (explicit options win; see Storage settings once)",
    ),
)  # fmt: skip

OPTION: dict[str, Option] = {o.name: o for o in STORE_OPTION_TABLE}
"""Every store option by canonical name."""

SEGMENT_TARGET_SIZE_DEFAULT: int = OPTION[SEGMENT_TARGET_SIZE].typed_default
SEGMENT_MAX_OPEN_DURATION_DEFAULT: float = OPTION[SEGMENT_MAX_OPEN_DURATION].typed_default
WAL_FLUSH_INTERVAL_DEFAULT: float = OPTION[WAL_FLUSH_INTERVAL].typed_default
WAL_MAX_SIZE_DEFAULT: int = OPTION[WAL_MAX_SIZE].typed_default
RETENTION_SIZE_CAP_DEFAULT: int | None = OPTION[RETENTION_SIZE_CAP].typed_default
RETENTION_SIZE_CAP_POLICY_DEFAULT: SizeCapPolicy = OPTION[RETENTION_SIZE_CAP_POLICY].typed_default
RETENTION_MAX_AGE_DEFAULT: float | None = OPTION[RETENTION_MAX_AGE].typed_default
RETENTION_STEADY_STATE_HEADROOM_DEFAULT: int = OPTION[RETENTION_STEADY_STATE_HEADROOM].typed_default
RETENTION_BACKPRESSURE_TIMEOUT_DEFAULT: float = OPTION[RETENTION_BACKPRESSURE_TIMEOUT].typed_default
SUBSCRIBER_EXPIRE_AFTER_DEFAULT: float | None = OPTION[SUBSCRIBER_EXPIRE_AFTER].typed_default
LEASE_TTL_DEFAULT: float = OPTION[LEASE_TTL].typed_default

STORE_OPTIONS: dict[str, tuple[str, str]] = {
    o.name: (o.default, o.help) for o in STORE_OPTION_TABLE if o.parse is not None
}
"""Store settings by canonical name: ``(default as shown, meaning)``."""

STORAGE_RETRY_TIMEOUT = "storage.retry_timeout"

# The `storage.<key>` options Quiver reads itself; every other `storage.<key>` is a
# setting of the object store's client (obstore) and is handed to it.
STORAGE_OPTION_TABLE: tuple[Option, ...] = (
    Option(STORAGE_RETRY_TIMEOUT, "60s", "object roots: how long a conditional write (commit "
           "record, acknowledgement, lease, manifest) that failed transiently (5xx, 409, a "
           "dropped connection, a timeout) is retried with the same bytes before its call "
           "fails, an unknown outcome being read back; also bounds the client's retries of "
           "other requests (this process's setting)",
           parse=_positive(parse_duration, GREATER_THAN_ZERO)),
)  # fmt: skip

STORAGE_OPTION: dict[str, Option] = {o.name: o for o in STORAGE_OPTION_TABLE}
"""The ``storage.<key>`` options Quiver reads itself, by name."""

STORAGE_RETRY_TIMEOUT_DEFAULT: float = STORAGE_OPTION[STORAGE_RETRY_TIMEOUT].typed_default
