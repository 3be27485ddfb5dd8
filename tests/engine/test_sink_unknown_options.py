"""The sink must refuse an unknown option at query start, as the source does.

README, Options: "An unknown option fails when the query starts, naming the near
miss". The sink's option validation (what ``QuiverStreamWriter`` and
``QuiverBatchWriter`` run at query start) accepts any key outside the ``segment.``,
``wal.``, ``retention.`` and ``subscriber.`` prefixes and drops it, so a typo of the
documented ``eventTimeColumn`` spelling, or a Kafka option, silently does nothing:
the store is created without an event-time column and batch reads never prune.
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
