"""The sink refuses an unknown option at query start, naming it, as the source does.

A typo of `eventTimeColumn` or a Kafka option never silently does nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.spark.options import validate_sink_options


@pytest.mark.parametrize(
    "key",
    ["eventTimeColum", "eventtimecolum", "startingOffsets", "segment_target_size"],
)
def test_sink_refuses_an_unknown_option_naming_it(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_sink_options({"path": str(tmp_path / "q"), key: "ts"})
    assert key.lower() in str(e.value).lower()
