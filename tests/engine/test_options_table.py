"""README's option tables are the option tables; unknown source options are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quiver_spark.config import StoreConfig
from quiver_spark.errors import ConfigError
from quiver_spark.option_table import OPTION, STORE_OPTIONS
from quiver_spark.options import store_config_from_options
from quiver_spark.spark.options_doc import BLOCKS
from quiver_spark.spark.source_options import (
    DEFAULT_MAX_SEGMENTS,
    parse_source_options,
    parse_timestamp,
)

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_the_readme_option_table_is_generated_from_the_option_table(name: str) -> None:
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- options:{name} -->\n(.*?)\n<!-- /options:{name} -->", text, re.S)
    assert m, f"README.md lacks the options:{name} block"
    assert m.group(1) == BLOCKS[name](), (
        "README.md's option table differs from the code's; regenerate it with "
        "`python -m quiver_spark.spark.options_doc`"
    )


@pytest.mark.parametrize(
    ("key", "value", "hint"),
    [
        ("startingOffsets", "latest", "startingPosition (earliest | latest | acked)"),
        ("maxOffsetsPerTrigger", "1000", "here it is maxRowsPerTrigger"),
        ("maxFilesPerTrigger", "5", "here it is maxSegmentsPerTrigger"),
        ("maxSegmentPerTrigger", "5", "did you mean 'maxSegmentsPerTrigger'?"),
        ("failOnDataLos", "false", "did you mean 'failOnDataLoss'?"),
    ],
)
def test_an_unknown_source_option_is_refused_naming_what_was_meant(
    tmp_path: Path, key: str, value: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options({"path": str(tmp_path), "subscriber": "s", key: value}, streaming=True)
    msg = str(err.value)
    assert f"unknown option {key!r}".lower() in msg.lower() and hint in msg


def test_known_options_in_any_case_and_store_options_pass(tmp_path: Path) -> None:
    opts = parse_source_options(
        {"path": str(tmp_path), "SUBSCRIBER": "s", "maxrowspertrigger": "10",
         "segment.max_open_duration": "1s", "segment.event_time_column": "ts"},
        streaming=True,
    )  # fmt: skip
    assert opts.max_rows == 10 and opts.max_segments == DEFAULT_MAX_SEGMENTS  # both apply


def test_a_new_subscriber_is_bounded_by_default(tmp_path: Path) -> None:
    opts = parse_source_options({"path": str(tmp_path), "subscriber": "s"}, streaming=True)
    assert opts.max_segments == DEFAULT_MAX_SEGMENTS
    lifted = parse_source_options(
        {"path": str(tmp_path), "subscriber": "s", "maxSegmentsPerTrigger": "none"}, streaming=True
    )
    assert lifted.max_segments is None


def test_starting_timestamp_takes_iso_or_epoch_millis_and_excludes_a_position(
    tmp_path: Path,
) -> None:
    assert parse_timestamp("t", "1700000000000") == 1_700_000_000_000_000_000
    assert parse_timestamp("t", "2023-11-14T22:13:20Z") == 1_700_000_000_000_000_000
    assert parse_timestamp("t", "2023-11-14T23:13:20+01:00") == 1_700_000_000_000_000_000
    with pytest.raises(ConfigError, match="ISO-8601"):
        parse_timestamp("startingTimestamp", "yesterday")
    with pytest.raises(ConfigError, match="not both"):
        parse_source_options(
            {"path": str(tmp_path), "subscriber": "s", "startingPosition": "earliest",
             "startingTimestamp": "1700000000000"},
            streaming=True,
        )  # fmt: skip


# each setting of StoreConfig() that is an option, by option name
CONFIG_FIELDS = {
    "segment.target_size": lambda c: c.segment.target_size_bytes,
    "segment.max_open_duration": lambda c: c.segment.max_open_duration_s,
    "segment.path": lambda c: c.segment.path,
    "segment.event_time_column": lambda c: c.segment.event_time_column,
    "wal.flush_interval": lambda c: c.wal.flush_interval_s,
    "wal.max_size": lambda c: c.wal.max_size_bytes,
    "wal.path": lambda c: c.wal.path,
    "retention.size_cap": lambda c: c.retention.size_cap_bytes,
    "retention.size_cap_policy": lambda c: c.retention.size_cap_policy,
    "retention.max_age": lambda c: c.retention.max_age_hours,
    "retention.steady_state_headroom": lambda c: c.retention.steady_state_headroom_bytes,
    "retention.backpressure_timeout": lambda c: c.retention.backpressure_timeout_s,
    "subscriber.expire_after": lambda c: c.subscriber_expire_after_s,
    "lease.ttl": lambda c: c.lease_ttl_s,
}


def test_every_store_setting_is_mapped_to_its_config_field() -> None:
    assert set(CONFIG_FIELDS) == set(STORE_OPTIONS)


@pytest.mark.parametrize("name", sorted(CONFIG_FIELDS))
def test_a_config_built_in_code_has_the_default_the_readme_shows(name: str) -> None:
    shown = OPTION[name].default
    documented = (
        None if shown == "none" or shown.startswith("<") else OPTION[name].parse(name, shown)
    )
    field = CONFIG_FIELDS[name]
    assert field(StoreConfig()) == documented
    assert field(store_config_from_options({})) == documented
