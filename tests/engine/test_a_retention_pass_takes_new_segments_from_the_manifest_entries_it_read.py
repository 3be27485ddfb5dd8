"""On an object root the MANIFEST is the publication point (ARCHITECTURE.md §11.3), and
its entries record what a retention pass keeps of a segment (size, rows, ingestion and
event times, §11.1). So a long-lived pass that reads a partition's MANIFEST because it
announced something new (§12) takes the new segments from those entries and GETs no
``.meta`` (§15.1): a pass after N other partitions each sealed one segment costs N
MANIFEST GETs and nothing per segment, and it decides exactly what a pass whose index
was read from every ``.meta`` decides. The ``.meta`` of a segment the pass chooses is
read when the choice is checked before deletion, so a damaged one is still never
deleted: it is kept, named and recorded damaged. A POSIX root, whose ``.meta`` is the
publication point (its MANIFEST may lag), reads each new ``.meta`` as before."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import (
    QuiverStore,
    RetentionConfig,
    SizeCapPolicy,
    StoreConfig,
)
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.retained import RetainedIndex
from quiver_spark.retention_plan import decide_retention
from quiver_spark.subscription import Subscription
from tests.stores import KeptGets, counted_opens, passes_by_w0_only, wal_in

_BUCKETS = itertools.count()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[KeptGets]:
    return counted_opens(monkeypatch, KeptGets)


def _seal(w: QuiverStore, rows: int = 3) -> None:
    w.append(pa.record_batch({"id": pa.array(range(rows), pa.int64())}))
    w.flush()
    w.finalize()


def _write(url: str, config: StoreConfig, pid: str, segments: int = 1, rows: int = 3) -> None:
    with QuiverStore.open(url, config, partition=pid, background=False) as w:
        for _ in range(segments):
            _seal(w, rows)


@contextmanager
def _w0_after_w1_sealed_again(root: str, config: StoreConfig) -> Iterator[QuiverStore]:
    """Partitions w-0 to w-2 of one segment each, all kept by subscriber ``slow``; the
    writer of w-0 after a retention pass, then another once w-1 sealed its segment 2."""
    for k in range(3):
        _write(root, config, f"w-{k}")
    with Subscription.open(root, "slow", config=config) as slow:
        slow.start("earliest")
    with QuiverStore.open(root, config, partition="w-0", background=False) as w:
        w.run_retention()
        _write(root, config, "w-1")
        w.run_retention()
        yield w


def _bucket(url: str) -> MemoryObjects:
    bucket, prefix = url.removeprefix("memory://").split("/", 1)
    return MemoryObjects(bucket, prefix)


def _url(tmp: Path) -> str:
    return f"memory://entries-{next(_BUCKETS)}-{tmp.name}/store"


def _from_metas(w: QuiverStore) -> RetainedIndex:
    """The reference: every retained segment's metadata read from its ``.meta``."""
    loc = w.segment_location
    return RetainedIndex.from_listing(
        {
            p: [loc.read_meta(p, s.seq) for s in segs]
            for p, segs in w._retention.index.listing().items()
        }
    )


def _facts(index: RetainedIndex) -> dict[str, list[tuple[int, int, int, int, int]]]:
    return {
        p: [(s.seq, s.size_bytes, s.rows, s.min_ingestion_ns, s.max_ingestion_ns) for s in segs]  # type: ignore[attr-defined]
        for p, segs in index.listing().items()
    }


@pytest.mark.parametrize("others", [3, 12])
def test_a_pass_after_n_other_partitions_each_sealed_one_segment_reads_n_manifests_and_no_meta(
    tmp_path: Path, reads: list[KeptGets], others: int
) -> None:
    url, config = _url(tmp_path), wal_in(tmp_path / "wal")
    for k in range(others + 1):
        _write(url, config, f"w-{k}")
    with Subscription.open(url, "slow", config=config) as slow:
        slow.start("earliest")  # nothing read: every segment is kept
    reads.clear()
    with QuiverStore.open(url, config, partition="w-0", background=False) as w:
        objects = reads[0]
        w.run_retention()  # the first pass surveys every partition
        for k in range(1, others + 1):
            _write(url, config, f"w-{k}")
        objects.gets.clear()
        w.run_retention()
        assert sorted(objects.ending("/MANIFEST")) == sorted(
            f"partitions/w-{k}/MANIFEST" for k in range(1, others + 1)
        )
        assert objects.ending(".meta") == []
        index = w._retention.index
        assert not index.surveyed
        for k in range(1, others + 1):
            assert [s.seq for s in index.segments(f"w-{k}")] == [1, 2]
        assert _facts(index) == _facts(_from_metas(w))


def test_a_pass_decides_what_a_pass_that_read_every_meta_decides(tmp_path: Path) -> None:
    rnd = random.Random(11)
    url, config = _url(tmp_path), wal_in(tmp_path / "wal")
    parts = [f"w-{k}" for k in range(4)]
    for p in parts:
        _write(url, config, p)
    with passes_by_w0_only(url, config, "slow") as (slow, w):
        for step in range(8):
            for p in rnd.sample(parts, k=rnd.randint(1, len(parts))):
                segments, rows = rnd.randint(1, 2), rnd.randint(1, 200)
                if p == "w-0":  # the pass's own writer
                    for _ in range(segments):
                        _seal(w, rows)
                else:
                    _write(url, config, p, segments=segments, rows=rows)
                time.sleep(0.002)  # ingestion times apart, for the time windows
            if rnd.random() < 0.5 and (got := slow.poll()) is not None:
                slow.ack(got.end)  # some acknowledged: the steady layer deletes them
            w.run_retention()
            index = w._retention.index
            assert not index.surveyed, f"step {step}"
            reference = _from_metas(w)
            assert _facts(index) == _facts(reference), f"step {step}"
            times = sorted(s.max_ingestion_ns for v in index.listing().values() for s in v) or [0]
            total = max(index.total_bytes(), 4)
            configs = [
                RetentionConfig(),
                RetentionConfig(max_age_hours=1 / 3600),  # what is 1 s older than now goes
                RetentionConfig(
                    size_cap_bytes=total // 2, size_cap_policy=SizeCapPolicy.DROP_OLDEST
                ),
                RetentionConfig(size_cap_bytes=total // 3),
                RetentionConfig(size_cap_bytes=total, steady_state_headroom_bytes=total // 4),
            ]
            with w.subscribers.exclusive() as reg:
                for cfg in configs:
                    for cut in (times[0], times[len(times) // 2], times[-1] + 1):
                        now = cut + 10**9
                        got_plan = decide_retention(index, reg, cfg, now, {})
                        want = decide_retention(reference, reg, cfg, now, {})
                        assert got_plan == want, f"step {step} {cfg} now={now}"


def test_a_damaged_meta_of_a_segment_known_from_its_entry_is_kept_and_named_when_chosen(
    tmp_path: Path,
) -> None:
    url, config = _url(tmp_path), wal_in(tmp_path / "wal")
    for k in range(3):
        _write(url, config, f"w-{k}")
    with passes_by_w0_only(url, config, "only") as (sub, w):
        _write(url, config, "w-2")  # segment 2, learned by w's next pass from its entry
        bucket = _bucket(url)
        (meta_key,) = [o.key for o in bucket.list("segments/w-2/") if o.key.endswith("2.meta")]
        got = bucket.get(meta_key)
        assert got is not None
        while (batch := sub.poll()) is not None:
            sub.ack(batch.end)  # every segment acknowledged: each is chosen
        bucket.put(meta_key, b"\x00" + got.data[1:])  # damaged after it was read
        result = w.run_retention()
        assert result.deleted.get("w-2") == [1]  # the damaged one is never deleted
        assert [(d.partition, d.seq) for d in result.damaged] == [("w-2", 2)]
        assert bucket.get(meta_key) is not None
        assert [o.key for o in bucket.list("segments/w-2/") if o.key.endswith("2.arrow")]
        again = w.run_retention()  # never chosen again, still named
        assert again.deleted.get("w-2", []) == []
        assert [(d.partition, d.seq) for d in again.damaged] == [("w-2", 2)]
    # recorded damaged in its MANIFEST: a new process's first pass names it too
    with QuiverStore.open(url, config, partition=None, background=False) as fresh:
        first = fresh.run_retention()
        assert first.deleted.get("w-2", []) == []
        assert [(d.partition, d.seq) for d in first.damaged] == [("w-2", 2)]


def test_a_pass_on_a_posix_root_reads_each_new_meta_as_before(tmp_path: Path) -> None:
    with _w0_after_w1_sealed_again(str(tmp_path / "store"), wal_in(tmp_path / "wal")) as w:
        assert not w._retention.index.surveyed
        assert [s.seq for s in w._retention.index.segments("w-1")] == [1, 2]
        # the .meta decides there (the MANIFEST may lag it): it was read and verified
        assert w.segment_location.cached("w-1", 2) is not None


def test_on_an_object_root_a_new_segment_known_from_its_entry_has_no_meta_read_yet(
    tmp_path: Path,
) -> None:
    with _w0_after_w1_sealed_again(_url(tmp_path), wal_in(tmp_path / "wal")) as w:
        assert [s.seq for s in w._retention.index.segments("w-1")] == [1, 2]
        assert w.segment_location.cached("w-1", 2) is None
