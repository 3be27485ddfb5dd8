"""One damaged ``.meta`` is contained: the file is named, retention keeps reclaiming
every other segment (and neither deletes nor forgets the damaged one), the CLI keeps
working (ARCHITECTURE.md §5.4, §15.1)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, SizeCapPolicy, StoreConfig
from quiver_spark.metrics import Metrics
from quiver_spark.retention import SEGMENT_DAMAGED, apply_retention
from quiver_spark.subscribers import Outcome, SubscriberRegistry

from ..cli.conftest import run, run_json
from ..damage import flip_byte

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))


def _meta_path(root: Path, partition: str, seq: int) -> Path:
    return root / "segments" / partition / f"{seq:020d}.meta"


def _store_with_a_damaged_meta(root: Path) -> dict[tuple[str, int], int]:
    """p-0 and p-1 with segments 1..3 each; the .meta of p-0/2 has a flipped byte.

    Returns the ``.arrow`` size of every segment.
    """
    sizes = {}
    for p in ("p-0", "p-1"):
        with QuiverStore.open(str(root), CFG, partition=p, background=False) as store:
            for i in range(3):
                store.append(pa.record_batch({"x": pa.array(range(i * 50, i * 50 + 50))}))
                meta = store.finalize()
                assert meta is not None
                sizes[(p, meta.seq)] = meta.size_bytes
    flip_byte(_meta_path(root, "p-0", 2), 30)
    return sizes


def _ack_everything(root: Path, *subscribers: str) -> None:
    with SubscriberRegistry.open(str(root)) as reg:
        for sub in subscribers:
            reg.register(sub, retained={"p-0": [1, 2, 3], "p-1": [1, 2, 3]})
            reg.record_many(sub, {"p-0": [1, 2, 3], "p-1": [1, 2, 3]}, Outcome.ACK)


def test_retention_reclaims_every_other_segment_and_keeps_the_damaged_one(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    sizes = _store_with_a_damaged_meta(root)
    _ack_everything(root, "a")
    metrics = Metrics()
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        with SubscriberRegistry.open(str(root)) as reg:
            result = apply_retention(
                store.segment_location, reg, RetentionConfig(), now_ns=1, metrics=metrics
            )
            assert not reg.is_deleted("p-0", 2), "the damaged segment was recorded deleted"
    assert result.deleted == {"p-0": [1, 3], "p-1": [1, 2, 3]}
    [damaged] = result.damaged
    assert (damaged.partition, damaged.seq) == ("p-0", 2)
    assert damaged.path.endswith("p-0/00000000000000000002.meta") and "crc" in damaged.error
    assert damaged.size_bytes == sizes[("p-0", 2)]
    assert sorted(os.listdir(root / "segments" / "p-0")) == [
        "00000000000000000002.arrow",
        "00000000000000000002.meta",
    ]
    assert metrics.get(SEGMENT_DAMAGED, partition="p-0") == 1


def test_size_cap_counts_the_damaged_segment_and_drops_only_readable_ones(tmp_path: Path) -> None:
    root = tmp_path / "store"
    sizes = _store_with_a_damaged_meta(root)
    with SubscriberRegistry.open(str(root)) as reg:
        reg.register("slow", retained={"p-0": [1, 2, 3], "p-1": [1, 2, 3]})
    total = sum(sizes.values())
    cap = RetentionConfig(
        size_cap_bytes=total - sizes[("p-0", 2)], size_cap_policy=SizeCapPolicy.DROP_OLDEST
    )
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        with SubscriberRegistry.open(str(root)) as reg:
            result = apply_retention(store.segment_location, reg, cap, now_ns=1)
            assert not reg.is_done("slow", "p-0", 2)
    assert result.plan.bytes_before == total, "the damaged segment's bytes were not counted"
    assert result.plan.bytes_after <= cap.size_cap_bytes
    assert ("p-0", 2) not in result.plan.drop_records
    assert _meta_path(root, "p-0", 2).exists()


def test_cli_subscribers_add_and_gc_work_around_a_damaged_meta(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_a_damaged_meta(root)
    res = run(["subscribers", root, "add", "late", "--start", "latest"])
    assert res.exit_code == 0, res.stderr
    with SubscriberRegistry.open(str(root)) as reg:
        assert reg.hwm("late", "p-0") == 3 and reg.hwm("late", "p-1") == 3
    doc = run_json(["gc", root])
    assert sorted((d["partition"], d["seq"]) for d in doc["deleted"]) == [
        ("p-0", 1),
        ("p-0", 3),
        ("p-1", 1),
        ("p-1", 2),
        ("p-1", 3),
    ]
    assert [(d["partition"], d["seq"]) for d in doc["damaged"]] == [("p-0", 2)]
    text = run(["gc", root]).stdout
    assert "00000000000000000002.meta" in text and "fsck" in text
    status = run_json(["status", root], code=1)  # exit 1: status met a corrupt file
    p0 = next(p for p in status["partitions"] if p["partition"] == "p-0")
    # the damaged segment is still published (counted) and named
    assert p0["segments"] == 1 and "00000000000000000002.meta" in (p0["error"] or "")
