"""The sink refuses an unknown option at query start, naming it, as the source does.

A typo of `segment.event_time_column` or a Kafka option never silently does nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError, UnknownOptionError
from quiver_spark.spark.options import validate_sink_options


@pytest.mark.parametrize(
    "key",
    ["eventTimeColum", "eventtimecolum", "startingOffsets", "segment_target_size"],
)
def test_sink_refuses_an_unknown_option_naming_it(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_sink_options({"path": str(tmp_path / "q"), key: "ts"})
    assert key.lower() in str(e.value).lower()


@pytest.mark.parametrize(
    "key, meant",
    [
        ("eventTimeColumn", "segment.event_time_column"),
        ("segments.path", "segment.path"),
        ("retention.max_retain_after_ingestion_hours", "retention.max_age"),
    ],
)
def test_an_option_under_a_former_name_is_refused_naming_the_option_meant(
    tmp_path: Path, key: str, meant: str
) -> None:
    """Each option has one name (0.1.0 keeps no earlier spellings): any other is an
    unknown option, and the error names the one meant."""
    with pytest.raises(UnknownOptionError) as e:
        validate_sink_options({"path": str(tmp_path / "q"), key: "48"})
    assert e.value.option.lower() == key.lower()
    assert f"did you mean {meant!r}?" in str(e.value)
