"""A writer with nothing new runs its retention pass every
``segment.max_open_duration`` on a POSIX root (a pass costs file-system calls) and,
on an object root, only every ``IDLE_RETENTION_PERIOD_S`` (a pass costs a dozen
requests), unless it is throttled by the size cap, where it keeps the short period
so room is seen as soon as it is made; a finalize still runs a pass at once on both
(ARCHITECTURE.md §15.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import reset_memory
from quiver_spark.root_kind import IDLE_RETENTION_PERIOD_S
from quiver_spark.subscription import Subscription


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    reset_memory()
    yield
    reset_memory()


def _config(tmp: Path) -> StoreConfig:
    return StoreConfig(
        wal=WalConfig(path=str(tmp / "wal"), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=1),
    )


def _writer(root: str, tmp: Path) -> tuple[QuiverStore, list[int]]:
    """A writer (no maintenance thread) on a store with a subscriber, its first pass
    run; the list collects the retention passes it runs from then on."""
    with QuiverStore.open(root, _config(tmp), partition=None) as s:
        s.ensure_schema(pa.schema([("id", pa.int64())]))
    with Subscription.open(root, "sub", config=_config(tmp)) as sub:
        sub.start("earliest")
    w = QuiverStore.open(root, _config(tmp), partition="p-0", background=False)
    w.maintain()
    passes: list[int] = []
    real = w.run_retention
    w.run_retention = lambda *a, **k: (passes.append(1), real(*a, **k))[1]  # type: ignore[method-assign]
    return w, passes


def _seconds_pass(w: QuiverStore, s: float) -> None:
    w._retention.last_pass -= s  # as if ``s`` seconds had gone by since the last pass


def test_an_idle_writer_on_an_object_root_runs_no_pass_within_the_idle_period(
    tmp_path: Path,
) -> None:
    w, passes = _writer("memory://idle/s", tmp_path)
    with w:
        counting = CountingObjects(w.objects)
        w.objects = counting
        _seconds_pass(w, 6.0)
        w.maintain()
        assert passes == [] and counting.total() == 0
        _seconds_pass(w, IDLE_RETENTION_PERIOD_S)
        w.maintain()
        assert passes == [1]


def test_an_idle_writer_on_a_posix_root_keeps_its_pass_every_max_open_duration(
    tmp_path: Path,
) -> None:
    w, passes = _writer(str(tmp_path / "store"), tmp_path)
    with w:
        _seconds_pass(w, 1.0)
        w.maintain()
        assert passes == [1]


def test_a_finalize_on_an_object_root_runs_a_pass_at_once(tmp_path: Path) -> None:
    w, passes = _writer("memory://idle/s", tmp_path)
    with w:
        w.append(pa.record_batch({"id": pa.array([1, 2], pa.int64())}))
        w.flush()
        assert w.finalize() is not None
        assert passes == [1]


def test_a_throttled_writer_on_an_object_root_keeps_the_short_period(tmp_path: Path) -> None:
    w, passes = _writer("memory://idle/s", tmp_path)
    with w:
        w._admission.throttled = True  # its last pass found the store over the size cap
        _seconds_pass(w, 1.0)
        w.maintain()
        assert passes == [1]
