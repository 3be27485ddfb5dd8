"""Options of the Quiver source (``spark.readStream.format("quiver")`` and ``spark.read``).

Spark hands options over as strings with case-insensitive keys; this module turns them
into a frozen :class:`SourceOptions` and fails fast on a bad value with an error that
names the option, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..config import validate_name
from ..errors import ConfigError
from ..options import parse_bool, parse_choice, parse_int, parse_size
from .options import spark_options, store_root

PATH = "path"
SUBSCRIBER = "subscriber"
STARTING_POSITION = "startingPosition"
MAX_SEGMENTS_PER_TRIGGER = "maxSegmentsPerTrigger"
MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger"
MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
INCLUDE_METADATA = "includeMetadata"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
SPLIT_SIZE = "splitSize"

# name -> (default shown in docs, description); the README options table uses these.
SOURCE_OPTIONS: dict[str, tuple[str, str]] = {
    PATH: ("required", "the store's root directory (or pass it to load())"),
    SUBSCRIBER: ("required for streams", "subscriber id whose acks this query records"),
    STARTING_POSITION: ("acked if known, else earliest", "earliest | latest | acked"),
    MAX_SEGMENTS_PER_TRIGGER: ("none", "at most this many segments per micro-batch"),
    MAX_BYTES_PER_TRIGGER: ("none", "at most this many segment bytes per micro-batch"),
    MAX_ROWS_PER_TRIGGER: ("none", "at most this many rows per micro-batch"),
    INCLUDE_METADATA: ("false", "add _quiver_partition/_segment/_row/_ingestion_time"),
    FAIL_ON_DATA_LOSS: (
        "true",
        "fail on a lost segment: vanished, quarantined or corrupt (else skip, count)",
    ),
    SPLIT_SIZE: ("64MB", "segments larger than this are read by several tasks"),
}


class StartingPosition(Enum):
    """Where a query without a checkpoint starts reading."""

    EARLIEST = "earliest"
    LATEST = "latest"
    ACKED = "acked"


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
    max_segments, max_bytes, max_rows
        Admission limits per micro-batch (None: unlimited). A batch always admits at
        least one segment, so a segment bigger than a limit still makes progress.
    include_metadata
        Add the four ``_quiver_*`` columns.
    fail_on_data_loss
        Fail (True) or skip and count (False) a segment that vanished or is corrupt.
    split_size_bytes
        Segments larger than this are split into record-batch ranges read in parallel.
    """

    path: str
    subscriber: str | None = None
    starting_position: StartingPosition | None = None
    max_segments: int | None = None
    max_bytes: int | None = None
    max_rows: int | None = None
    include_metadata: bool = False
    fail_on_data_loss: bool = True
    split_size_bytes: int = 64 * 1024 * 1024

    @property
    def limited(self) -> bool:
        """True when any admission limit is set."""
        return any(v is not None for v in (self.max_segments, self.max_bytes, self.max_rows))


def _get(options: Mapping[str, Any], name: str) -> Any:
    """Lookup in lower-cased ``options``; empty strings count as absent."""
    v = options.get(name.lower())
    return None if v is None or (isinstance(v, str) and v.strip() == "") else v


def _positive_int(name: str, value: Any) -> int | None:
    return None if value is None else parse_int(name, value, minimum=1)


def parse_source_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    """Validate Spark's string ``options`` for a stream (``streaming``) or a batch read.

    Raises
    ------
    ConfigError
        A missing required option or a bad value; the message names the option, the
        value and what is allowed.
    """
    path = store_root(options)
    options = spark_options(options)
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
        StartingPosition(
            parse_choice(STARTING_POSITION, str(start).lower(), [p.value for p in StartingPosition])
        )
        if start is not None
        else None
    )
    max_bytes_raw = _get(options, MAX_BYTES_PER_TRIGGER)
    max_bytes = parse_size(MAX_BYTES_PER_TRIGGER, max_bytes_raw) if max_bytes_raw else None
    if max_bytes is not None and max_bytes <= 0:
        raise ConfigError(MAX_BYTES_PER_TRIGGER, max_bytes_raw, "a size greater than zero")
    split_raw = _get(options, SPLIT_SIZE)
    split = parse_size(SPLIT_SIZE, split_raw) if split_raw is not None else 64 * 1024 * 1024
    if split <= 0:
        raise ConfigError(SPLIT_SIZE, split_raw, "a size greater than zero")
    inc = _get(options, INCLUDE_METADATA)
    fail = _get(options, FAIL_ON_DATA_LOSS)
    return SourceOptions(
        path=path,
        subscriber=sub,
        starting_position=position,
        max_segments=_positive_int(
            MAX_SEGMENTS_PER_TRIGGER, _get(options, MAX_SEGMENTS_PER_TRIGGER)
        ),
        max_bytes=max_bytes,
        max_rows=_positive_int(MAX_ROWS_PER_TRIGGER, _get(options, MAX_ROWS_PER_TRIGGER)),
        include_metadata=parse_bool(INCLUDE_METADATA, inc) if inc is not None else False,
        fail_on_data_loss=parse_bool(FAIL_ON_DATA_LOSS, fail) if fail is not None else True,
        split_size_bytes=split,
    )
