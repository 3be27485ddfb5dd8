"""The documented default admission limit is dropped when another limit is set.

README, Source options: `maxSegmentsPerTrigger` has default `1000` ("at most this
many segments per micro-batch"), with `none` as the way to lift it. Setting
`maxRowsPerTrigger` or `maxBytesPerTrigger` (the Kafka-like `maxOffsetsPerTrigger`
the README points Kafka users to) silently removes the 1000-segment bound: a store of
many small segments then lets one micro-batch plan any number of them, which is the
unbounded first batch the default exists to prevent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.spark.source_options import parse_source_options


@pytest.mark.parametrize(
    "extra", [{"maxRowsPerTrigger": "100000000"}, {"maxBytesPerTrigger": "1TB"}]
)
def test_default_segment_limit_holds_when_another_limit_is_set(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    opts = parse_source_options(
        {"path": str(tmp_path / "q"), "subscriber": "s", **extra}, streaming=True
    )
    assert opts.max_segments == 1000
