"""Damage seen by a Spark source: contained, named, and never skipped silently.

- one damaged ``.meta``: skipped with ``failOnDataLoss=false`` while every other
  segment is read and reclaimed (the commit's retention pass goes on around it);
- a segment ``quiver fsck --quarantine`` moved aside before a new subscriber started:
  data loss, naming partition, seq and the reason file;
- a read schema naming a column the store lacks: refused at query start.
"""

from __future__ import annotations

import os

import pytest

from quiver_spark.subscription import lost_report as data_loss_report

from ..cli.conftest import run_json
from ..damage import flip_byte
from .source_helpers import (
    Collector,
    run_available_now,
    segment_files,
    stream,
    wait_until,
    write_segments,
)


def _file(root: str, seq: int, suffix: str) -> str:
    return os.path.join(root, "segments", "p-0", f"{seq:020d}{suffix}")


def test_a_damaged_meta_is_skipped_and_everything_else_is_read_and_reclaimed(
    spark, tmp_path
) -> None:
    root = str(tmp_path / "store")
    write_segments(root, 4)
    flip_byte(_file(root, 2, ".meta"), 30)
    got = Collector()
    df = stream(spark, root, "d", maxSegmentsPerTrigger="1", failOnDataLoss="false")
    run_available_now(df, str(tmp_path / "c"), got)
    assert got.keys() == list(range(10)) + list(range(20, 40))
    report = data_loss_report(root, "d")
    assert [(s["seq"], s["reason"]) for s in report["segments"]] == [(2, "corrupt")]
    # every acked segment but the damaged one is reclaimed; that one stays for fsck
    wait_until(lambda: segment_files(root) == [2], 30, "acked segments to be reclaimed")
    assert os.path.exists(_file(root, 2, ".arrow"))


def _quarantine(root: str, seq: int) -> str:
    """Damage segment ``seq`` and let ``quiver fsck --quarantine`` move it aside."""
    flip_byte(_file(root, seq, ".arrow"), 200)
    doc = run_json(["fsck", root, "--quarantine"], code=1)
    assert doc["quarantined"] == 1
    reason = os.path.join(root, "segments", "p-0", "quarantine", f"{seq:020d}.reason")
    assert os.path.exists(reason)
    return reason


def test_a_segment_quarantined_before_a_new_subscriber_started_fails_its_query(
    spark, tmp_path
) -> None:
    root = str(tmp_path / "store")
    write_segments(root, 3)
    reason = _quarantine(root, 1)
    got = Collector()
    q = (
        stream(spark, root, "late")
        .writeStream.foreachBatch(got)
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="segment 1 of partition p-0 is quarantined") as e:
        q.awaitTermination(120)
    assert reason in str(e.value)
    assert got.keys() == []


def test_a_quarantined_segment_is_skipped_and_counted_without_fail_on_data_loss(
    spark, tmp_path
) -> None:
    root = str(tmp_path / "store")
    write_segments(root, 3)
    reason = _quarantine(root, 2)
    got = Collector()
    run_available_now(stream(spark, root, "late", failOnDataLoss="false"), str(tmp_path / "c"), got)
    assert got.keys() == list(range(10)) + list(range(20, 30))
    report = data_loss_report(root, "late")
    assert (report["dropped"], report["lost"]) == (0, 1)
    [lost] = report["segments"]
    assert (lost["seq"], lost["reason"], lost["evidence"]) == (2, "quarantined", reason)


def test_a_read_schema_naming_a_column_the_store_lacks_fails_at_query_start(
    spark, tmp_path
) -> None:
    root = str(tmp_path / "store")
    write_segments(root, 1)
    wanted = "k long, nope string"
    with pytest.raises(Exception, match=r"\['nope'\].*its columns are \['k', 'v', 'ts'\]"):
        spark.read.format("quiver").schema(wanted).load(root).collect()
    q = (
        spark.readStream.format("quiver")
        .option("subscriber", "s")
        .schema(wanted)
        .load(root)
        .writeStream.foreachBatch(Collector())
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=r"\['nope'\].*its columns are \['k', 'v', 'ts'\]"):
        q.awaitTermination(120)
    # a schema with a subset of the store's columns is fine
    rows = spark.read.format("quiver").schema("v string, k long").load(root).collect()
    assert sorted(r.k for r in rows) == list(range(10))
