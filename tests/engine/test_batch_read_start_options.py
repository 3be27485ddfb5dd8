"""A batch read honours or refuses the start options; it never ignores them.

`startingTimestamp` and `startingPosition` on `spark.read.format("quiver")` either
limit what is read or fail at query start naming the option: asking for no rows never
returns every retained segment.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import ConfigError
from quiver_spark.spark.source import QuiverBatchReader
from quiver_spark.spark.source_read import store_spark_schema


@pytest.mark.parametrize(
    "extra",
    [{"startingTimestamp": "2099-01-01T00:00:00Z"}, {"startingPosition": "latest"}],
)
def test_batch_read_does_not_silently_ignore_a_start_option(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    root = str(tmp_path / "q")
    with QuiverStore.open(root, partition="p-0", background=False) as store:
        for i in range(2):
            store.append(pa.record_batch({"x": pa.array([i], type=pa.int64())}))
            store.finalize()
    opts = {"path": root, **extra}
    try:
        reader = QuiverBatchReader(opts, store_spark_schema(opts))
    except ConfigError as e:  # refused at query start, naming the option: fine
        assert next(iter(extra)) in str(e)
        return
    assert reader.partitions() == []  # nothing was ingested at/after 2099, or is "latest"
