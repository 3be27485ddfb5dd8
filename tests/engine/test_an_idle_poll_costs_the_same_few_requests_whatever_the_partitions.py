"""A long-lived subscriber with nothing new asks the storage the same few things
whatever the partitions (ARCHITECTURE.md §12): the ack log's catch-up and one
listing of the segments location's root, which names the partitions, the quarantine
mark's version and every partition's publication hint. Rows published after a poll
started are seen by the next one; a hint that is lost, left behind by a writer that
died before its publication, or missing (a store written before hints) never hides a
row: the partition is then looked at itself."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.layout import hint_name
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.segment import SegmentLocation
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.planning import FULL_LISTING_PERIOD_S
from quiver_spark.subscription.position import Position
from tests.faults import FaultyIO
from tests.stores import KeptGets, counted_opens, wal_in

_BUCKETS = itertools.count()


def _batch() -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(3), pa.int64())})


def _write(url: str, config: StoreConfig, pid: str) -> None:
    with QuiverStore.open(url, config, partition=pid, background=False) as w:
        w.append(_batch())
        w.flush()
        w.finalize()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[CountingObjects]:
    return counted_opens(monkeypatch, CountingObjects)


def _drained_reader(url: str, config: StoreConfig) -> Subscription:
    sub = Subscription.open(url, "idle", config=config)
    sub.start("earliest")
    while (got := sub.poll()) is not None:
        sub.ack(got.end)
    sub._state.last_retention = float("inf")  # no rate-limited retention pass counted
    return sub


def _latest_offset(sub: Subscription) -> Position:
    """What the Spark source's ``latestOffset`` does."""
    with sub.one_call():
        start = sub.acked()
        sub.ack(start)
        return sub.next_batch_end(start)


@pytest.mark.parametrize("partitions", [4, 200])
@pytest.mark.parametrize("retained", [True, False], ids=["live", "drained"])
def test_an_idle_poll_and_an_idle_latest_offset_ask_at_most_two_requests(
    tmp_path: Path, counted: list[CountingObjects], partitions: int, retained: bool
) -> None:
    url = f"memory://idle-{next(_BUCKETS)}/store"
    config = wal_in(tmp_path / "wal")
    for k in range(partitions):
        _write(url, config, f"w-{k}")
    if retained:  # a subscriber that read nothing keeps every segment
        with Subscription.open(url, "slow", config=config) as slow:
            slow.start("earliest")
    counted.clear()
    with _drained_reader(url, config) as sub:
        assert len(sub.store.segments()) == (partitions if retained else 0)
        (c,) = counted
        for _ in range(2):
            c.counts.clear()
            assert sub.poll() is None
            assert c.total() <= 2, dict(c.counts)
            before = sub.acked()
            c.counts.clear()
            assert not _latest_offset(sub).is_after(before)
            assert c.total() <= 2, dict(c.counts)
        _write(url, config, f"w-{partitions - 1}")  # published after the last poll
        got = sub.poll()
        assert got is not None and [m.partition for m in got.segments] == [f"w-{partitions - 1}"]


def _two_partitions(tmp: Path) -> tuple[str, StoreConfig]:
    url = f"memory://hints-{next(_BUCKETS)}/store"
    config = wal_in(tmp / "wal")
    _write(url, config, "w-0")
    _write(url, config, "w-1")
    return url, config


def _bucket(url: str) -> MemoryObjects:
    bucket, prefix = url.removeprefix("memory://").split("/", 1)
    return MemoryObjects(bucket, prefix)


def test_a_partition_without_a_hint_is_looked_at_itself(tmp_path: Path) -> None:
    url, config = _two_partitions(tmp_path)
    with _drained_reader(url, config) as sub:
        bucket = _bucket(url)
        for info in bucket.list("segments/"):
            if info.key.endswith(".hint"):
                bucket.delete(info.key)  # lost, or a store written before hints
        with pytest.MonkeyPatch.context() as mp:  # a writer that writes none
            mp.setattr(SegmentLocation, "_announce", lambda self, p, s: None)
            _write(url, config, "w-1")
        got = sub.poll()
        assert got is not None and [(m.partition, m.seq) for m in got.segments] == [("w-1", 2)]


def test_a_hint_left_by_a_writer_that_died_before_its_publication_never_hides_a_later_one(
    tmp_path: Path,
) -> None:
    url, config = _two_partitions(tmp_path)
    with _drained_reader(url, config) as sub:
        bucket = _bucket(url)
        bucket.put(f"segments/~hints/{hint_name('w-0', 2)}", b"")  # announced, never published
        assert sub.poll() is None
        assert sub.poll() is None  # looked at every poll, nothing hidden, nothing made up
        _write(url, config, "w-0")  # its successor publishes past it
        got = sub.poll()
        assert got is not None and [(m.partition, m.seq) for m in got.segments] == [("w-0", 2)]


def test_a_stale_hint_hides_nothing_past_the_full_listing(tmp_path: Path) -> None:
    url, config = _two_partitions(tmp_path)
    with _drained_reader(url, config) as sub:
        with pytest.MonkeyPatch.context() as mp:  # a writer that announces nothing
            mp.setattr(SegmentLocation, "_announce", lambda self, p, s: None)
            _write(url, config, "w-1")
        assert sub.poll() is None  # its old hint says nothing new: not looked at
        # the safety net's period passed
        sub.planner._last_full_listing = time.monotonic() - FULL_LISTING_PERIOD_S - 1
        got = sub.poll()
        assert got is not None and [(m.partition, m.seq) for m in got.segments] == [("w-1", 2)]


def test_a_writer_keeps_one_hint_per_partition(tmp_path: Path) -> None:
    url, config = _two_partitions(tmp_path)
    for _ in range(3):
        _write(url, config, "w-0")
    hints = sorted(i.key for i in _bucket(url).list("segments/") if i.key.endswith(".hint"))
    assert hints == [f"segments/~hints/{hint_name(p, s)}" for p, s in (("w-0", 4), ("w-1", 1))]


def _posix_idle_calls(tmp: Path, partitions: int) -> list[str]:
    root = str(tmp / f"store-{partitions}")
    config = wal_in(tmp / f"wal-{partitions}")
    for k in range(partitions):
        _write(root, config, f"h-{k}")
    io = FaultyIO()
    store = QuiverStore.open(root, config, partition=None, create=False, io=io)
    with Subscription(store, "idle", owns_store=True) as sub:
        sub.start("earliest")
        while (got := sub.poll()) is not None:
            sub.ack(got.end)
        sub._state.last_retention = float("inf")
        sub._state.last_seal = float("inf")
        assert sub.poll() is None
        io.trace.clear()
        assert sub.poll() is None
        return [t.op for t in io.trace]


def test_an_idle_poll_on_a_posix_root_makes_the_same_file_calls_whatever_the_partitions(
    tmp_path: Path,
) -> None:
    small = _posix_idle_calls(tmp_path, 2)
    large = _posix_idle_calls(tmp_path, 40)
    assert small == large
    assert len(small) <= 4, small  # the ack log (lock, listing, read) and the root's listing


def test_a_new_readers_first_latest_offset_reads_each_manifest_and_the_quarantine_mark_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, config = _two_partitions(tmp_path)
    with Subscription.open(url, "slow", config=config) as slow:
        slow.start("earliest")
    made: list[KeptGets] = counted_opens(monkeypatch, KeptGets)
    with Subscription.open(url, "new", config=config) as sub:
        start = sub.start("earliest")
        (c,) = made
        c.gets.clear()
        with sub.one_call():  # the Spark source's first latestOffset
            sub.ack(start)
            end = sub.next_batch_end(start)
        assert end.segments == {"w-0": 1, "w-1": 1}
        for key in ("partitions/w-0/MANIFEST", "partitions/w-1/MANIFEST"):
            assert c.gets.count(key) == 1, c.gets
        assert c.gets.count("segments/QUARANTINE") <= 1, c.gets
