"""The default `maxSegmentsPerTrigger` (1000) holds when another limit is set.

Setting `maxRowsPerTrigger` or `maxBytesPerTrigger` adds a bound; it does not lift
the 1000-segment one, so a store of many small segments never plans an unbounded
micro-batch unless `maxSegmentsPerTrigger=none` says so.
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
