"""The walk of ``path`` from ``spark.readStream.format("quiver").load(path)`` to the
first offset: each handle Spark makes of the source (the schema lookup, the stream
reader) folds its options once (one read of the store profile), parses its root once
and opens the store once (one GET of STORE and one of POLICY on an object root),
whatever number of helpers it passes them through.

Spark makes each handle in a Python worker of its own; the calls are made here in one
process as the stream runner makes them (``schema``; then ``streamReader``,
``initialOffset``, ``latestOffset``), counting per handle.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import StructType

import quiver_spark.spark.options as spark_options_module
import quiver_spark.urls as urls
from quiver_spark import QuiverStore
from quiver_spark.spark.datasource import QuiverDataSource
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix

__all__ = ["fault_proxies", "moto_s3"]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Counts of root parses, option folds and store opens, as they happen."""
    counts: collections.Counter[str] = collections.Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **k: Any) -> Any:
            counts[name] += 1
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(urls, "_parse_root", counting("root parsed", urls._parse_root))
    monkeypatch.setattr(
        spark_options_module,
        "merged_options",
        counting("options folded", spark_options_module.merged_options),
    )
    opened = QuiverStore.open.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(QuiverStore, "open", classmethod(counting("store opened", opened)))
    yield counts


def test_each_handle_folds_parses_and_opens_once(
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
    counted: collections.Counter[str],
    tmp_path: Any,
) -> None:
    proxy = fault_proxies()
    storage = {**moto_s3.options, "aws_endpoint": proxy.endpoint}
    root = f"{moto_s3.url}/{unique_prefix('walk')}/store"
    with QuiverStore.open(
        root, partition="p-0", storage_options=storage, background=False
    ) as store:
        store.append(pa.record_batch({"x": pa.array(range(10))}))
        store.flush()
        store.finalize()
    options = {
        "path": root,
        "subscriber": "walker",
        "wal.path": str(tmp_path / "wal"),
        **{f"storage.{k}": str(v) for k, v in storage.items()},
    }

    def requests(name: str) -> int:
        return len(proxy.requests("GET", rf"/{name}$"))

    counted.clear()
    before = requests("STORE"), requests("POLICY")
    schema = QuiverDataSource(options).schema()  # the schema lookup's handle
    assert dict(counted) == {"root parsed": 1, "options folded": 1, "store opened": 1}
    assert (requests("STORE"), requests("POLICY")) == (before[0] + 1, before[1] + 1)

    counted.clear()
    before = requests("STORE"), requests("POLICY")
    spark_schema = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    reader = QuiverDataSource(options).streamReader(spark_schema)  # the stream runner's
    try:
        start = reader.initialOffset()
        reader.latestOffset(start, ReadAllAvailable())
        assert dict(counted) == {"root parsed": 1, "options folded": 1, "store opened": 1}
        assert requests("STORE") == before[0] + 1
    finally:
        reader.stop()
