"""Retention through the store: steady-state deletion, size cap under both policies."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import (
    QuiverStore,
    RetentionConfig,
    SegmentConfig,
    SizeCapPolicy,
    StoreAtCapacityError,
    StoreConfig,
)
from quiver_spark.subscribers import Outcome


def _batch(lo: int, n: int = 1000) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + n), type=pa.int64())})


def _cfg(**retention: object) -> StoreConfig:
    return StoreConfig(
        segment=SegmentConfig(max_open_duration_s=3600),
        retention=RetentionConfig(**retention),  # type: ignore[arg-type]
    )


def test_segments_every_subscriber_acked_are_deleted_and_no_others(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), _cfg(), background=False) as store:
        store.subscribers.register("a")
        store.subscribers.register("b")
        for i in range(3):
            store.append(_batch(i * 1000))
            store.finalize()
        store.subscribers.record("a", "p-0", [1, 2, 3], Outcome.ACK)
        store.subscribers.record("b", "p-0", [1], Outcome.ACK)
        deleted = store.run_retention().deleted
        assert deleted == {"p-0": [1]}
        assert [m.seq for m in store.segments()] == [2, 3]
        assert "quiver_gc_evictions_total" in (tmp_path / "metrics" / "writer-p-0.prom").read_text()


def test_backpressure_throttles_intake_and_never_deletes_unacknowledged_data(
    tmp_path: Path,
) -> None:
    cfg = _cfg(size_cap_bytes=40_000, backpressure_timeout_s=0.3)
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        store.subscribers.register("slow")
        with pytest.raises(StoreAtCapacityError) as e:
            for i in range(100):
                store.append(_batch(i * 1000))
                store.finalize()
        assert e.value.retryable
        kept = [m.seq for m in store.segments()]
        assert kept == list(range(1, len(kept) + 1)), "an unacknowledged segment was deleted"
        assert store.metrics.total("quiver.ingest.throttle_total") >= 1
        store.subscribers.record("slow", "p-0", kept, Outcome.ACK)
        store.append(_batch(10**6))  # space freed by acks: intake resumes
        assert [m.seq for m in store.segments()] == []


def test_drop_oldest_evicts_the_oldest_unacknowledged_segments_and_records_dropped(
    tmp_path: Path,
) -> None:
    cfg = _cfg(size_cap_bytes=40_000, size_cap_policy=SizeCapPolicy.DROP_OLDEST)
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        store.subscribers.register("slow")
        for i in range(12):
            store.append(_batch(i * 1000))
            store.finalize()
        kept = [m.seq for m in store.segments()]
        assert kept and kept[-1] == 12 and kept[0] > 1
        assert kept == list(range(kept[0], 13)), "drop_oldest must evict oldest first"
        for seq in range(1, kept[0]):
            assert store.subscribers.is_done("slow", "p-0", seq)
        assert store.subscribers.hwm("slow", "p-0") == kept[0] - 1
        assert store.metrics.total("quiver.segment.dropped_total") == kept[0] - 1
