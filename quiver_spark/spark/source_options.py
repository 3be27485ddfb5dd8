"""Options of the Quiver source (``spark.readStream.format("quiver")`` and ``spark.read``).

Spark hands options over as strings with case-insensitive keys; this module turns them
into a frozen :class:`SourceOptions` and fails fast on a bad value with an error that
names the option, the value and what is allowed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, UnknownOptionError
from ..options import (
    STORE_OPTIONS,
    Option,
    canonical_option,
    did_you_mean,
    parse_bool,
    parse_int,
    parse_size,
    validate_name,
)
from ..subscription import StartPosition
from ..subscription.catchup import (
    DEFAULT_HEAD_SHARE,
    CatchUpOrder,
    given_head_share,
    parse_head_share,
)
from ..subscription.horizon import parse_horizon
from .options import STORAGE_PREFIX, spark_options, storage_options, store_root

PATH = "path"
SUBSCRIBER = "subscriber"
STARTING_POSITION = "startingPosition"
STARTING_TIMESTAMP = "startingTimestamp"
MAX_SEGMENTS_PER_TRIGGER = "maxSegmentsPerTrigger"
MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger"
MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
INCLUDE_METADATA = "includeMetadata"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
SPLIT_SIZE = "splitSize"
CATCH_UP_ORDER = "catchUpOrder"
CATCH_UP_HEAD_SHARE = "catchUpHeadShare"
ACCEPTANCE_HORIZON = "acceptanceHorizon"

STREAM_ONLY = (
    "startingPosition",
    "startingTimestamp",
    "maxSegmentsPerTrigger",
    "maxBytesPerTrigger",
    "maxRowsPerTrigger",
    "catchUpOrder",
    "catchUpHeadShare",
    "acceptanceHorizon",
)
"""The options of a stream only (a batch read refuses them)."""

GREATER_THAN_ZERO = "a size greater than zero"


def _positive_size(option: str, value: object) -> int:
    size = parse_size(option, value)
    if size <= 0:
        raise ConfigError(option, value, GREATER_THAN_ZERO)
    return size


def _positive_int(option: str, value: object) -> int:
    return parse_int(option, value, minimum=1)


def _segments_limit(option: str, value: object) -> int | None:
    """A positive count, or ``none`` (unlimited)."""
    return None if str(value).strip().lower() == "none" else _positive_int(option, value)


def _catch_up_order(option: str, value: object) -> CatchUpOrder:
    return CatchUpOrder.parse(str(value), option)


def _head_share(option: str, value: object) -> float:
    return parse_head_share(value, option)


def _horizon(option: str, value: object) -> float | None:
    return parse_horizon(value, option)


def parse_timestamp(option: str, value: object) -> int:
    """ISO-8601 (a zone, else UTC) or epoch milliseconds -> epoch nanoseconds."""
    text = str(value).strip()
    if re.fullmatch(r"[0-9]+", text):
        return int(text) * 1_000_000
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            option, value, "an ISO-8601 time such as 2026-11-26T08:00:00Z, or epoch milliseconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1_000_000) * 1000


# The one table of reader options (README's source table is checked against it).
SOURCE_OPTION_TABLE: tuple[Option, ...] = (
    Option(PATH, "required", "the store's root directory (or pass it to `load()`)"),
    Option(SUBSCRIBER, "required for streams", "the subscriber whose acknowledgements this "
           "query records; registered on first use"),
    Option(STARTING_POSITION, "acked if known, else earliest", "`earliest` \\| `latest` \\| "
           "`acked`, for a query without a checkpoint"),
    Option(STARTING_TIMESTAMP, "none", "start, for a query without a checkpoint, at the first "
           "segment holding a row ingested at or after this time (ISO-8601 such as "
           "`2026-11-26T08:00:00Z`, or epoch milliseconds)", parse=parse_timestamp),
    Option(MAX_SEGMENTS_PER_TRIGGER, "1000", "at most this many segments "
           "per micro-batch, also when another limit is set (`none`: unlimited)",
           parse=_segments_limit),
    Option(MAX_BYTES_PER_TRIGGER, "none", "at most this many segment bytes per micro-batch",
           parse=_positive_size),
    Option(MAX_ROWS_PER_TRIGGER, "none", "at most this many rows per micro-batch",
           parse=_positive_int),
    Option(INCLUDE_METADATA, "false", "add `_quiver_partition`, `_quiver_segment`, "
           "`_quiver_row`, `_quiver_ingestion_time`, computed from segment metadata (no bytes "
           "stored per row)", parse=parse_bool),
    Option(FAIL_ON_DATA_LOSS, "true", "a published segment that is gone (not deleted by "
           "retention: quarantined, vanished) or corrupt fails the query naming partition and "
           "sequence; `false` skips and counts it", parse=parse_bool),
    Option(SPLIT_SIZE, "64MB", "segments larger than this are read by several tasks; "
           "smaller ones are packed into tasks of about this size (one task per segment "
           "costs Spark ~30 ms each)", parse=_positive_size),
    Option(CATCH_UP_ORDER, "oldest", "`oldest` \\| `newest`: which unread segments a "
           "micro-batch takes first; `newest` serves new data first and walks the backlog "
           "down from the newest with the rest of each trigger's limits, exactly once "
           "either way", parse=_catch_up_order),
    Option(CATCH_UP_HEAD_SHARE, f"{DEFAULT_HEAD_SHARE}", "with `catchUpOrder=newest`, the "
           "share of each per-trigger limit new data gets while a backlog is left (the "
           "backlog gets the rest); either gets it all alone",
           parse=_head_share),
    Option(ACCEPTANCE_HORIZON, "none", "a duration such as `30m` or `6h`: a segment whose "
           "newest row was ingested longer ago than this when its micro-batch was planned "
           "is not delivered but recorded `dropped` for the subscriber (counted, shown by "
           "`quiver status`), either catch-up order, exactly once", parse=_horizon),
)  # fmt: skip

SOURCE_OPTION: dict[str, Option] = {o.name: o for o in SOURCE_OPTION_TABLE}
"""Every reader option by name."""

SOURCE_OPTIONS: dict[str, tuple[str, str]] = {
    o.name: (o.default, o.help) for o in SOURCE_OPTION_TABLE
}

DEFAULT_MAX_SEGMENTS: int = SOURCE_OPTION[MAX_SEGMENTS_PER_TRIGGER].typed_default
"""Admission limit when none is set: a new subscriber's first batch is bounded (Delta's
``maxFilesPerTrigger`` default is 1000 files too); ``maxSegmentsPerTrigger=none`` lifts it."""
INCLUDE_METADATA_DEFAULT: bool = SOURCE_OPTION[INCLUDE_METADATA].typed_default
FAIL_ON_DATA_LOSS_DEFAULT: bool = SOURCE_OPTION[FAIL_ON_DATA_LOSS].typed_default
SPLIT_SIZE_DEFAULT: int = SOURCE_OPTION[SPLIT_SIZE].typed_default

# What users of Kafka's, Delta's and the file source type by reflex, and what it is here.
FOREIGN_OPTIONS: dict[str, str] = {
    "startingoffsets": f"{STARTING_POSITION} (earliest | latest | acked) or {STARTING_TIMESTAMP}",
    "startingversion": f"{STARTING_POSITION} or {STARTING_TIMESTAMP}",
    "startingoffsetsbytimestamp": STARTING_TIMESTAMP,
    "maxoffsetspertrigger": MAX_ROWS_PER_TRIGGER,
    "maxfilespertrigger": MAX_SEGMENTS_PER_TRIGGER,
    "subscribe": SUBSCRIBER,
    "topic": SUBSCRIBER,
    "maxfileage": "the store policy retention.max_age (quiver config PATH set ...)",
}


FOREIGN_SPELLINGS = {
    k.lower(): k
    for k in (
        "startingOffsets",
        "startingVersion",
        "startingOffsetsByTimestamp",
        "maxOffsetsPerTrigger",
        "maxFilesPerTrigger",
        "subscribe",
        "topic",
        "maxFileAge",
    )
}
"""How Kafka's, Delta's and the file source's documentation spell those options: Spark
hands keys over lower-cased, and the error names the option as the user typed it."""


def check_known(options: Mapping[str, Any]) -> None:
    """Refuse any option the source does not know, naming it and what was meant."""
    known = {o.name.lower() for o in SOURCE_OPTION_TABLE}
    for key, value in options.items():
        k = str(key).lower()
        if k in known or canonical_option(k) is not None or k == "config":
            continue
        if k.startswith(STORAGE_PREFIX) and len(k) > len(STORAGE_PREFIX):
            continue
        if k in FOREIGN_OPTIONS:
            hint = f" (a Kafka, Delta or file-source option; here it is {FOREIGN_OPTIONS[k]})"
        else:
            hint = did_you_mean(k, [*(o.name for o in SOURCE_OPTION_TABLE), *STORE_OPTIONS])
        raise UnknownOptionError(
            FOREIGN_SPELLINGS.get(k, str(key)),
            value,
            f"a Quiver source option{hint}: "
            + ", ".join(o.name for o in SOURCE_OPTION_TABLE)
            + ", or a store option (segment.*, wal.*, retention.*, subscriber.*, storage.*)",
        )


@dataclass(frozen=True)
class SourceOptions:
    """Validated source options (see :data:`SOURCE_OPTIONS`).

    Attributes
    ----------
    path
        Root directory of the store.
    subscriber
        Subscriber id (None for batch reads).
    starting_position
        None means the default: ``acked`` for a registered subscriber, else ``earliest``.
    starting_timestamp_ns
        Start at the first segment holding a row ingested at or after this time.
    max_segments, max_bytes, max_rows
        Admission limits per micro-batch (None: unlimited). A batch always admits at
        least one segment, so a segment bigger than a limit still makes progress.
    include_metadata
        Add the four ``_quiver_*`` columns.
    fail_on_data_loss
        Fail (True) or skip and count (False) a segment that vanished or is corrupt.
    split_size_bytes
        Segments larger than this are split into record-batch ranges read in parallel.
    catch_up_order, head_share
        Which unread segments a batch takes first, and the share of the limits new
        data gets while newest first has a backlog (:mod:`quiver_spark.subscription.catchup`; None:
        not given, the default; refused with oldest first).
    horizon_s
        The acceptance horizon in seconds (None: off): older segments are recorded
        dropped, not delivered (:mod:`quiver_spark.subscription.horizon`).
    """

    path: str
    subscriber: str | None = None
    starting_position: StartPosition | None = None
    starting_timestamp_ns: int | None = None
    max_segments: int | None = DEFAULT_MAX_SEGMENTS
    max_bytes: int | None = None
    max_rows: int | None = None
    include_metadata: bool = INCLUDE_METADATA_DEFAULT
    fail_on_data_loss: bool = FAIL_ON_DATA_LOSS_DEFAULT
    split_size_bytes: int = SPLIT_SIZE_DEFAULT
    catch_up_order: CatchUpOrder = CatchUpOrder.OLDEST
    head_share: float | None = None
    horizon_s: float | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    """``storage.<key>`` options: an object-store root's client settings (never shown)."""

    @property
    def limited(self) -> bool:
        """True when any admission limit is set."""
        return any(v is not None for v in (self.max_segments, self.max_bytes, self.max_rows))


def _get(options: Mapping[str, Any], name: str) -> Any:
    """Lookup in lower-cased ``options``; empty strings count as absent."""
    v = options.get(name.lower())
    return None if v is None or (isinstance(v, str) and v.strip() == "") else v


def _setting(options: Mapping[str, Any], name: str) -> Any:
    """Reader option ``name`` parsed by its table entry; absent: the table's default."""
    return SOURCE_OPTION[name].value(_get(options, name))


def parse_source_options(options: Mapping[str, Any], *, streaming: bool | None) -> SourceOptions:
    """Validate Spark's string ``options`` for a stream (``streaming``) or a batch read.

    Raises
    ------
    ConfigError
        A missing required option or a bad value; the message names the option, the
        value and what is allowed.
    """
    path = store_root(options)
    options = spark_options(options)
    check_known(options)
    if streaming is False:  # None: either (the schema lookup, shared by both)
        for name in STREAM_ONLY:
            if _get(options, name) is not None:
                raise UnknownOptionError(
                    name,
                    _get(options, name),
                    "no start position or per-trigger limit in a batch read (spark.read "
                    "reads every retained segment; filter on _quiver_ingestion_time to "
                    "read from a time): these options are for spark.readStream",
                )
    sub = _get(options, SUBSCRIBER)
    if sub is not None:
        sub = validate_name("subscriber", str(sub).strip())
    elif streaming:
        raise ConfigError(
            SUBSCRIBER,
            None,
            "a subscriber id ([A-Za-z0-9_.-]{1,64}) naming this consumer, e.g. "
            '.option("subscriber", "parquet_exporter"); it is required for streams',
        )
    start = _get(options, STARTING_POSITION)
    position = (
        StartPosition.parse(str(start).lower(), STARTING_POSITION) if start is not None else None
    )
    since = _setting(options, STARTING_TIMESTAMP)
    if since is not None and position is not None:
        raise ConfigError(
            STARTING_TIMESTAMP,
            _get(options, STARTING_TIMESTAMP),
            f"either {STARTING_POSITION} or {STARTING_TIMESTAMP}, not both",
        )
    max_bytes = _setting(options, MAX_BYTES_PER_TRIGGER)
    split = _setting(options, SPLIT_SIZE)
    max_rows = _setting(options, MAX_ROWS_PER_TRIGGER)
    max_segments = _setting(options, MAX_SEGMENTS_PER_TRIGGER)  # bounded unless `none`
    order = _setting(options, CATCH_UP_ORDER)
    return SourceOptions(
        path=path,
        subscriber=sub,
        starting_position=position,
        starting_timestamp_ns=since,
        max_segments=max_segments,
        max_bytes=max_bytes,
        max_rows=max_rows,
        include_metadata=_setting(options, INCLUDE_METADATA),
        fail_on_data_loss=_setting(options, FAIL_ON_DATA_LOSS),
        split_size_bytes=split,
        catch_up_order=order,
        head_share=given_head_share(
            order, _get(options, CATCH_UP_HEAD_SHARE), CATCH_UP_HEAD_SHARE, CATCH_UP_ORDER
        ),
        horizon_s=_setting(options, ACCEPTANCE_HORIZON),
        storage_options=storage_options(options),
    )
