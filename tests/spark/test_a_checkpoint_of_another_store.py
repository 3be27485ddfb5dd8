"""A query restarted with a checkpoint written against another store (ARCHITECTURE.md §17).

Two stores whose partitions share a name (partition ids are host names): a subscriber
query checkpointed against the first and restarted against the second is refused at
its first call, naming both stores, before anything is acknowledged; following the
advice "quiver subscribers ... add" changes nothing; a new checkpointLocation reads
the second store whole. A checkpoint written before offsets named their store still
resumes on its own store, and on a store where its subscriber is not registered the
error says what registering it would do instead of advising it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.errors import StreamingQueryException

from quiver_spark import QuiverStore
from quiver_spark.cli import cli

from .source_helpers import (
    Collector,
    checkpoint_offsets,
    registry_hwm,
    run_available_now,
    segment_files,
    stream,
    write_segments,
)

PART = "vm-0"  # the same host name in both stores


def store_id(root: str) -> str:
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        assert store.store_id is not None
        return store.store_id


def fails(df: Any, ckpt: str) -> str:
    """Run ``df`` to a collector from ``ckpt``; the first line of the error it fails with."""
    q = (
        df.writeStream.foreachBatch(Collector())
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as e:
        q.awaitTermination(120)
    return str(e.value).splitlines()[0]


def two_stores(tmp_path: Any) -> tuple[str, str]:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_segments(a, 1, partition=PART, first_key=0)
    write_segments(b, 3, partition=PART, first_key=100)
    return a, b


def test_a_subscriber_query_restarted_against_another_store_is_refused_before_acknowledging(
    spark: Any, tmp_path: Any
) -> None:
    a, b = two_stores(tmp_path)
    ckpt = str(tmp_path / "ckpt")
    first = Collector()
    run_available_now(stream(spark, a, "ck"), ckpt, first)
    assert first.keys() == list(range(10))
    assert checkpoint_offsets(ckpt)[0] == {PART: 1}

    msg = fails(stream(spark, b, "ck"), ckpt)
    assert store_id(a) in msg and store_id(b) in msg and b in msg, msg
    assert "new checkpointLocation" in msg and "subscribers" not in msg, msg

    # what the earlier advice led to: the subscriber registered in the second store
    added = CliRunner().invoke(cli, ["subscribers", b, "add", "ck"])
    assert added.exit_code == 0, added.output
    msg = fails(stream(spark, b, "ck"), ckpt)
    assert store_id(a) in msg and store_id(b) in msg, msg
    assert registry_hwm(b, "ck", PART) == 0, "the refused query acknowledged segments"
    assert segment_files(b, PART) == [1, 2, 3], "a segment never read was deleted"

    fresh = Collector()  # the remedy the error names
    run_available_now(stream(spark, b, "ck"), str(tmp_path / "ckpt-b"), fresh)
    assert fresh.keys() == list(range(100, 130))


def as_written_before_offsets_named_their_store(ckpt: str) -> None:
    """Rewrite every offset of ``ckpt`` to version 1 (no store), as an earlier
    quiver_spark wrote them (the checksum files go: Spark then reads without)."""
    d = os.path.join(ckpt, "offsets")
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if name.endswith(".crc"):
            os.remove(path)
            continue
        with open(path) as f:
            lines = f.read().splitlines()
        offset = json.loads(lines[-1])
        lines[-1] = json.dumps({"v": 1, "segments": offset["segments"]})
        with open(path, "w") as f:
            f.write("\n".join(lines))


def test_a_checkpoint_from_before_offsets_named_their_store_resumes_on_its_own_store(
    spark: Any, tmp_path: Any
) -> None:
    a, b = two_stores(tmp_path)
    ckpt, copy = str(tmp_path / "ckpt"), str(tmp_path / "ckpt-copy")
    first = Collector()
    run_available_now(stream(spark, a, "ck"), ckpt, first)
    as_written_before_offsets_named_their_store(ckpt)
    shutil.copytree(ckpt, copy)
    write_segments(a, 2, partition=PART, first_key=10)

    resumed = Collector()
    run_available_now(stream(spark, a, "ck"), ckpt, resumed)
    assert first.keys() + resumed.keys() == list(range(30)), "lost or duplicated rows"
    assert registry_hwm(a, "ck", PART) >= 1

    msg = fails(stream(spark, b, "ck"), copy)
    assert "not registered" in msg and "without reading them" in msg, msg
    assert "new checkpointLocation" in msg and b in msg, msg
    assert segment_files(b, PART) == [1, 2, 3]
