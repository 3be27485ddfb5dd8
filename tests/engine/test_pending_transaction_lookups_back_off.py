"""On an object root a writer looks for the commit record of a pending transaction at
every maintenance tick for ``RESOLVE_GRACE_S`` after its first record, then ever more
rarely (1 s, 2 s, 4 s... at most every ``RESOLVE_CAP_S``): a batch that is never rerun
costs a request every half minute instead of several a second, and a decision that
comes late is still applied (ARCHITECTURE.md §10)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import quiver_spark.partition.rebuild as rebuild_module
import quiver_spark.partition.sealing as sealing_module
import quiver_spark.partition.state as state_module
import quiver_spark.partition.writer as writer_module
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import reset_memory


class Clock:
    """``time`` for the writer's modules, with a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    reset_memory()
    yield
    reset_memory()


def _open(tmp: Path) -> QuiverStore:
    config = StoreConfig(
        wal=WalConfig(path=str(tmp / "wal"), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
    )
    return QuiverStore.open("memory://txns/s", config, partition="p-0", background=False)


def test_an_undecided_transaction_is_looked_for_ever_more_rarely_and_applied_when_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    for module in (
        writer_module,
        sealing_module,
        rebuild_module,
        state_module,
    ):  # the writer's modules
        monkeypatch.setattr(module, "time", clock)
    with _open(tmp_path) as store:
        w = store.writer
        assert w is not None
        txn = store.begin_txn("app", 1)
        store.append(pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())}), txn_id=txn)
        store.flush()
        counting = CountingObjects(store.commits.objects)
        store.commits.objects = counting
        for _ in range(8):  # within the grace period: every tick looks
            w.maintain()
        assert counting.counts["get"] == 8
        clock.now += sealing_module.RESOLVE_GRACE_S
        counting.counts.clear()
        for _ in range(4 * 300):  # five minutes of ticks every 0.25 s
            w.maintain()
            clock.now += 0.25
        assert 10 <= counting.counts["get"] <= 16  # 1, 2, 4, 8, 16, then every 30 s
        assert w.pending_txns()
        store.commit_txn("app", 1, [("p-0", txn)], 3)
        clock.now += sealing_module.RESOLVE_CAP_S
        w.maintain()
        assert not w.pending_txns()
        assert store.finalize() is not None
        assert sorted(x for b in store.scan() for x in b.column("id").to_pylist()) == [1, 2, 3]
