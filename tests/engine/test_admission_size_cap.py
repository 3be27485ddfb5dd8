"""Under ``backpressure`` a writer admits a batch only while the store's bytes are within
``retention.size_cap``, counted from its last retention pass plus what it admitted since.

A new handle looks at the store before its first admission (every new process, task
retry or non-reused Python worker), a long-lived one counts the bytes it admits instead
of waiting for the next finalize, so usage stays within the bound of ARCHITECTURE.md
§15.2: one batch over the cap for writers one after another, and at most
``segment.target_size`` plus one batch per concurrently appending writer. The bound is on
bytes, not on time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import (
    QuiverStore,
    RetentionConfig,
    SegmentConfig,
    StoreAtCapacityError,
    StoreConfig,
)
from tests.child import run_python

CAP = 40_000
TARGET = 20_000
BATCH_ROWS = 2250  # int64: 18,000 bytes


def _cfg(cap: int = CAP, target: int = TARGET, timeout: float = 0.3) -> StoreConfig:
    return StoreConfig(
        segment=SegmentConfig(max_open_duration_s=3600, target_size_bytes=target),
        retention=RetentionConfig(size_cap_bytes=cap, backpressure_timeout_s=timeout),
    )


def _batch(lo: int, rows: int = BATCH_ROWS) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(lo, lo + rows), type=pa.int64())})


def _usage(root: Path) -> int:
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        return sum(m.size_bytes for m in s.segments()) + sum(s.wal_bytes().values())


def _store_with_a_subscriber_that_never_acks(root: Path, cfg: StoreConfig) -> None:
    with QuiverStore.open(str(root), cfg, partition=None) as store:
        store.subscribers.register("never")


def test_a_freshly_opened_writer_refuses_its_first_batch_when_the_store_is_over_the_cap(
    tmp_path: Path,
) -> None:
    cfg = _cfg()
    _store_with_a_subscriber_that_never_acks(tmp_path, cfg)
    with QuiverStore.open(str(tmp_path), cfg, partition="p-0", background=False) as a:
        for i in range(3):
            a.append(_batch(i * BATCH_ROWS))
            a.finalize()
    before = _usage(tmp_path)
    assert before > CAP
    with QuiverStore.open(str(tmp_path), cfg, partition="p-1", background=False) as b:
        with pytest.raises(StoreAtCapacityError):
            b.append(_batch(0))
    assert _usage(tmp_path) == before


def test_a_long_lived_writer_stops_admitting_once_its_own_bytes_reach_the_cap(
    tmp_path: Path,
) -> None:
    cfg = _cfg(target=10_000_000)  # no finalize, hence no retention pass, in between
    _store_with_a_subscriber_that_never_acks(tmp_path, cfg)
    batch = _batch(0, 1000)
    admitted = 0
    with QuiverStore.open(str(tmp_path), cfg, background=False) as store:
        with pytest.raises(StoreAtCapacityError):
            for _ in range(40):
                store.append(batch)
                admitted += batch.nbytes
        store.flush()
        assert _usage(tmp_path) <= CAP + batch.nbytes + 1024
    assert CAP <= admitted <= CAP + batch.nbytes


WRITER = """
    import pyarrow as pa
    from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig
    from quiver_spark import StoreAtCapacityError
    cfg = StoreConfig(
        segment=SegmentConfig(max_open_duration_s=3600, target_size_bytes=target),
        retention=RetentionConfig(size_cap_bytes=cap, backpressure_timeout_s=0.3),
    )
    admitted = 0
    with QuiverStore.open(root, cfg, partition=partition, background=False) as store:
        try:
            for i in range(batches):
                store.append(pa.record_batch({"id": pa.array(range(rows), type=pa.int64())}))
                admitted += 1
        except StoreAtCapacityError:
            pass
    print(admitted)
"""


def test_ten_short_lived_writer_processes_stay_within_one_batch_of_the_cap(tmp_path: Path) -> None:
    _store_with_a_subscriber_that_never_acks(tmp_path, _cfg())
    admitted = []
    for i in range(10):
        out = run_python(
            WRITER, capture=True, root=str(tmp_path), partition=f"p-{i}",
            target=TARGET, cap=CAP, batches=1, rows=BATCH_ROWS,
        )  # fmt: skip
        admitted.append(int(out.stdout.split()[-1]))
    usage = _usage(tmp_path)
    assert usage <= CAP + BATCH_ROWS * 8 + 1024, (usage, admitted)
    assert admitted[:3] == [1, 1, 1] and sum(admitted) == 3, admitted


def test_concurrent_short_lived_writers_exceed_the_cap_by_at_most_a_segment_and_a_batch_each(
    tmp_path: Path,
) -> None:
    n, rows, target = 6, 750, 10_000  # 6,000-byte batches
    _store_with_a_subscriber_that_never_acks(tmp_path, _cfg(target=target))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    procs = []
    for i in range(n):
        code = "".join(
            f"{k} = {v!r}\n"
            for k, v in dict(
                root=str(tmp_path), partition=f"p-{i}", target=target, cap=CAP,
                batches=20, rows=rows,
            ).items()
        ) + textwrap.dedent(WRITER)  # fmt: skip
        procs.append(
            subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        )
    admitted = [int(p.communicate(timeout=120)[0].split()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    usage = _usage(tmp_path)
    bound = CAP + n * (target + rows * 8 + 1024)
    assert usage <= bound, (usage, bound, admitted)
    assert sum(admitted) < n * 20, "nobody was throttled"
