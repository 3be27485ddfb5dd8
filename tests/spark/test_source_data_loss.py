"""Dropped, corrupt and vanished segments under both failOnDataLoss settings."""

from __future__ import annotations

import os

import pytest

from quiver_spark import RetentionConfig, SizeCapPolicy
from quiver_spark.retention import apply_retention
from quiver_spark.store import QuiverStore
from quiver_spark.subscribers import StartPosition, SubscriberRegistry
from quiver_spark.subscription import lost_report as data_loss_report

from ..damage import flip_byte
from .source_helpers import Collector, run_available_now, segment_files, stream, write_segments


def _arrow(root: str, seq: int) -> str:
    return os.path.join(root, "segments", "p-0", f"{seq:020d}.arrow")


def _dropping_sink(root: str, collector: Collector):
    """foreachBatch body that, during batch 0, has retention drop segment 3.

    Exactly what ``drop_oldest`` or time retention does: ``dropped`` for every
    subscriber not done and ``deleted`` durably recorded, then the files removed.
    """

    def sink(df, batch_id):
        if batch_id == 0:
            store = QuiverStore.open(root, partition=None, create=False)
            with SubscriberRegistry.open(root) as reg, reg.exclusive():
                dropped = reg.condemn({"p-0": [3]})
                store.segment_location.delete("p-0", [3])
            store.close()
            assert dropped == {"d": {"p-0": [3]}}
        collector(df, batch_id)

    return sink


@pytest.mark.parametrize("fail", ["true", "false"])
def test_segment_dropped_by_retention_is_skipped_with_a_warning_and_counted(spark, tmp_path, fail):
    root = str(tmp_path / "store")
    write_segments(root, 4)
    got = Collector()
    df = stream(spark, root, "d", maxSegmentsPerTrigger="1", failOnDataLoss=fail)
    run_available_now(df, str(tmp_path / "c"), _dropping_sink(root, got))
    assert got.keys() == list(range(20)) + list(range(30, 40))
    report = data_loss_report(root, "d")
    assert (report["dropped"], report["lost"]) == (1, 0)


def test_drop_oldest_retention_records_dropped_for_a_lagging_subscriber(tmp_path):
    root = str(tmp_path / "store")
    metas = write_segments(root, 4)
    store = QuiverStore.open(root, partition=None, create=False)
    with SubscriberRegistry.open(root) as reg:
        reg.register("d", start=StartPosition.EARLIEST, retained={"p-0": [1, 2, 3, 4]})
        total = sum(m.size_bytes for m in metas)
        cap = RetentionConfig(size_cap_bytes=total - 1, size_cap_policy=SizeCapPolicy.DROP_OLDEST)
        result = apply_retention(store.segment_location, reg, cap, now_ns=0)
        assert reg.is_deleted("p-0", 1) and reg.hwm("d", "p-0") == 1
    store.close()
    assert result.dropped == {"d": {"p-0": [1]}}
    assert segment_files(root) == [2, 3, 4]


def test_corrupt_segment_fails_the_query_naming_partition_and_seq(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 3)
    flip_byte(_arrow(root, 2), 200)
    sink = Collector()
    q = (
        stream(spark, root, "c", maxSegmentsPerTrigger="1")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="segment 2 of partition p-0 is corrupt"):
        q.awaitTermination(120)
    assert all(not (10 <= k < 20) for k in sink.keys()), "corrupt rows were served"
    assert data_loss_report(root, "c")["segments"][0]["seq"] == 2


def test_corrupt_segment_is_skipped_and_counted_without_fail_on_data_loss(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 3)
    flip_byte(_arrow(root, 2), 200)
    sink = Collector()
    run_available_now(stream(spark, root, "c", failOnDataLoss="false"), str(tmp_path / "c"), sink)
    assert sink.keys() == list(range(10)) + list(range(20, 30))
    report = data_loss_report(root, "c")
    assert (report["dropped"], report["lost"]) == (0, 1)
    assert report["segments"][0]["reason"] == "corrupt"


def _vanishing_sink(root: str, collector: Collector):
    """foreachBatch body that deletes segment 3 (no dropped record) during batch 0."""

    def sink(df, batch_id):
        if batch_id == 0:
            for suffix in (".meta", ".arrow"):
                os.remove(_arrow(root, 3).replace(".arrow", suffix))
        collector(df, batch_id)

    return sink


def test_vanished_segment_fails_the_query_naming_partition_and_seq(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 4)
    got = Collector()
    q = (
        stream(spark, root, "v", maxSegmentsPerTrigger="1")
        .writeStream.foreachBatch(_vanishing_sink(root, got))
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="segment 3 of partition p-0 is missing"):
        q.awaitTermination(120)
    assert got.keys() == list(range(20))


def test_vanished_segment_is_skipped_and_counted_without_fail_on_data_loss(spark, tmp_path):
    root = str(tmp_path / "store")
    write_segments(root, 4)
    got = Collector()
    run_available_now(
        stream(spark, root, "v", maxSegmentsPerTrigger="1", failOnDataLoss="false"),
        str(tmp_path / "c"),
        _vanishing_sink(root, got),
    )
    assert got.keys() == list(range(20)) + list(range(30, 40))
    report = data_loss_report(root, "v")
    assert (report["dropped"], report["lost"]) == (0, 1)
    assert report["segments"][0]["reason"] == "missing"
