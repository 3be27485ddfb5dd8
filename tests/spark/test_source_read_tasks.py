"""Read tasks: small segments packed into one task, large ones split (no JVM needed).

A packed task verifies each of its segments before serving any row of it and applies
the data-loss policy to each segment on its own, exactly as one task per segment did.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver_spark.errors import DataLossError
from quiver_spark.segment import SegmentMeta
from quiver_spark.spark.source_read import (
    META_PARTITION,
    META_ROW,
    META_SEGMENT,
    QuiverInputPartition,
    arrow_target,
    read_partition,
    spark_schema_of,
)
from quiver_spark.subscription import lost_report as data_loss_report
from quiver_spark.subscription.read_tasks import (
    OPEN_COST_BYTES,
    ReadTask,
    pack_read_tasks,
    split_segment,
)

from ..damage import flip_byte
from .source_helpers import ROWS_PER_SEGMENT, write_segments

MB = 1024 * 1024


def _sized(meta: SegmentMeta, seq: int, size: int, batches: int = 10) -> SegmentMeta:
    return replace(meta, seq=seq, size_bytes=size, batches=batches)


def _shape(tasks: list) -> list[list[tuple[int, int, int]]]:
    return [[(m.seq, b0, b1) for m, b0, b1 in t] for t in tasks]


@pytest.fixture
def meta(tmp_path) -> SegmentMeta:
    return write_segments(str(tmp_path / "s"), 1)[0]


def test_small_segments_are_packed_in_order_into_tasks_of_about_the_split_size(meta):
    metas = [_sized(meta, seq, 30 * MB) for seq in range(1, 11)]  # 300 MB
    tasks = pack_read_tasks(metas, 64 * MB, min_tasks=2)
    assert len(tasks) == 5  # ceil(300 / 64)
    assert _shape(tasks) == [[(s, 0, 10), (s + 1, 0, 10)] for s in range(1, 11, 2)]


def test_packing_keeps_at_least_min_tasks_when_there_are_enough_segments(meta):
    two = [_sized(meta, seq, 1 * MB) for seq in (1, 2)]
    assert _shape(pack_read_tasks(two, 64 * MB, min_tasks=2)) == [[(1, 0, 10)], [(2, 0, 10)]]
    assert _shape(pack_read_tasks(two, 64 * MB, min_tasks=8)) == [[(1, 0, 10)], [(2, 0, 10)]]
    assert len(pack_read_tasks(two, 64 * MB, min_tasks=1)) == 1


def test_tiny_segments_count_an_open_cost_so_many_make_several_tasks(meta):
    tiny = [_sized(meta, seq, 100) for seq in range(1, 101)]
    tasks = pack_read_tasks(tiny, 64 * MB, min_tasks=1)
    assert len(tasks) == -(-100 * OPEN_COST_BYTES // (64 * MB))  # 7, not 1
    assert [m.seq for t in tasks for m, _, _ in t] == list(range(1, 101))
    assert max(len(t) for t in tasks) - min(len(t) for t in tasks) <= 1


def test_large_segments_are_still_read_by_several_tasks_never_packed(meta):
    metas = [_sized(meta, 1, 10 * MB), _sized(meta, 2, 100 * MB), _sized(meta, 3, 10 * MB)]
    tasks = pack_read_tasks(metas, 64 * MB, min_tasks=1)
    assert _shape(tasks) == [[(2, 0, 5)], [(2, 5, 10)], [(1, 0, 10), (3, 0, 10)]]
    assert pack_read_tasks([], 64 * MB, min_tasks=2) == []


def _task(root: str, metas: list[SegmentMeta], fail: bool) -> QuiverInputPartition:
    return QuiverInputPartition(
        ReadTask(
            tuple((m, 0, m.batches) for m in metas),
            segments_url=os.path.join(root, "segments"),
            root=root,
            subscriber="t",
            fail_on_data_loss=fail,
        )
    )


def _target(metas: list[SegmentMeta], root: str, include_metadata: bool) -> pa.Schema:
    path = os.path.join(root, "segments", "p-0", f"{metas[0].seq:020d}.arrow")
    schema = pa.ipc.open_file(pa.memory_map(path)).schema
    return arrow_target(spark_schema_of(schema, include_metadata))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.sampled_from([1, 100_000, MB, 3 * MB, 16 * MB, 100 * MB]), max_size=14),
    split=st.sampled_from([1, 1000, MB, 4 * MB, 64 * MB, 2**40]),
    min_tasks=st.integers(1, 9),
)
def test_every_plan_reads_each_batch_once_in_order_with_enough_tasks(
    meta: SegmentMeta, sizes: list[int], split: int, min_tasks: int
) -> None:
    metas = [_sized(meta, seq, size) for seq, size in enumerate(sizes, 1)]
    tasks = pack_read_tasks(metas, split, min_tasks=min_tasks)
    assert all(tasks), "no empty task"
    pieces = [(m.seq, b0, b1) for t in tasks for m, b0, b1 in t]
    assert sorted(pieces) == sorted(
        (m.seq, b0, b1) for m in metas for b0, b1 in split_segment(m, split)
    )  # every batch range exactly once
    assert len(tasks) <= max(1, sum(len(split_segment(m, split)) for m in metas)) or not metas
    small = [m.seq for m in metas if len(split_segment(m, split)) == 1]
    packed = [[m.seq for m, _, _ in t] for t in tasks if len(split_segment(t[0][0], split)) == 1]
    assert [q for t in packed for q in t] == small  # small ones in order, groups contiguous
    assert len(tasks) >= min(len(metas), min_tasks)  # parallelism kept when it can be


def test_a_packed_task_serves_every_segment_with_its_own_metadata_columns(tmp_path):
    root = str(tmp_path / "store")
    metas = write_segments(root, 3)
    target = _target(metas, root, include_metadata=True)
    batches = list(read_partition(_task(root, metas, fail=True), target))
    assert all(b.schema.equals(target) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("k").to_pylist() == list(range(3 * ROWS_PER_SEGMENT))
    assert table.column(META_SEGMENT).to_pylist() == [
        s for s in (1, 2, 3) for _ in range(ROWS_PER_SEGMENT)
    ]
    assert table.column(META_ROW).to_pylist() == list(range(ROWS_PER_SEGMENT)) * 3
    assert set(table.column(META_PARTITION).to_pylist()) == {"p-0"}


def test_a_corrupt_segment_in_a_packed_task_is_skipped_alone_without_fail_on_data_loss(
    tmp_path,
):
    root = str(tmp_path / "store")
    metas = write_segments(root, 3)
    flip_byte(os.path.join(root, "segments", "p-0", f"{2:020d}.arrow"), 200)
    target = _target(metas, root, include_metadata=False)
    rows = pa.Table.from_batches(list(read_partition(_task(root, metas, fail=False), target)))
    assert rows.column("k").to_pylist() == list(range(10)) + list(range(20, 30))
    report = data_loss_report(root, "t")
    assert report["lost"] == 1 and report["segments"][0]["seq"] == 2


def test_a_corrupt_segment_in_a_packed_task_fails_it_before_any_of_its_rows(tmp_path):
    root = str(tmp_path / "store")
    metas = write_segments(root, 3)
    flip_byte(os.path.join(root, "segments", "p-0", f"{2:020d}.arrow"), 200)
    target = _target(metas, root, include_metadata=False)
    served: list[int] = []
    with pytest.raises(DataLossError, match="segment 2 of partition p-0 is corrupt"):
        for b in read_partition(_task(root, metas, fail=True), target):
            served.extend(b.column(0).to_pylist())
    assert served == list(range(10))  # segment 1 only; the task fails with it
