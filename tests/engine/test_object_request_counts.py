"""On an object root, what a process start, a consumer's trigger and an idle writer
ask of the storage does not grow with the segments retained, and no call repeats a
read it already made: the partitions are found by one listing with a delimiter, the
ack log is caught up and the publication hints listed once per call (§12), the subscription
records are read again only when the registry's subscribers change or every
``RECORDS_PERIOD_S``, a commit creates its record without reading it first, and a
pending transaction's commit record is asked for ever more rarely
(ARCHITECTURE.md §2). Requests are counted as a bill counts them: a listing is one
request a page of 1,000 names."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.objects import Level, ObjectInfo, ObjectStore, Stored
from quiver_spark.objects.base import CountingObjects, list_pages
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import counted_opens, wal_in

LARGE = 1_100  # segments in the large store's p-0: 2,200 objects, 3 listing pages
_BUCKETS = itertools.count()


class KeyedCounts(CountingObjects):
    """Counts requests as :class:`CountingObjects` does, and which keys they were for."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.keys: Counter[tuple[str, str]] = Counter()

    def _k(self, op: str, key: str, n: int = 1) -> None:
        with self._lock:
            self.keys[(op, key)] += n

    def get(self, key: str) -> Stored | None:
        self._k("get", key)
        return super().get(key)

    def info(self, key: str) -> ObjectInfo | None:
        self._k("head", key)
        return super().info(key)

    def head(self, key: str) -> str | None:
        self._k("head", key)
        return super().head(key)

    def create(self, key: str, data: bytes) -> str:
        self._k("create", key)
        return super().create(key, data)

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        found = super().list(prefix, after=after)
        self._k("list", prefix, list_pages(len(found)))
        return found

    def list_dirs(self, prefix: str) -> list[str]:
        found = super().list_dirs(prefix)
        self._k("list", prefix, list_pages(len(found)))
        return found

    def list_level(self, prefix: str) -> Level:
        found = super().list_level(prefix)
        self._k("list", prefix, list_pages(len(found.dirs) + len(found.objects)))
        return found

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.keys.clear()

    def of(self, op: str, key: str) -> int:
        return self.keys[(op, key)]


@dataclass
class Shop:
    """A store on ``memory://`` with two partitions, a subscriber ``slow`` that
    acknowledged nothing, ``c`` that acknowledged all but each partition's newest
    segment and ``idle`` that acknowledged everything."""

    url: str
    config: StoreConfig
    segments: int


def _batch() -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(10), pa.int64())})


def _build(tmp: Path, per_partition: dict[str, int]) -> Shop:
    url = f"memory://counts-{next(_BUCKETS)}/store"
    config = wal_in(tmp / "wal")
    for pid, n in per_partition.items():
        with QuiverStore.open(url, config, partition=pid, background=False) as w:
            for _ in range(n):
                w.append(_batch())
                w.flush()
                w.finalize()
    with Subscription.open(url, "slow", config=config) as sub:
        sub.start("earliest")
    with Subscription.open(url, "c", config=config) as sub:
        sub.start("earliest")
        sub.ack(Position({p: n - 1 for p, n in per_partition.items()}))
    with Subscription.open(url, "idle", config=config) as sub:
        sub.start("latest")
    return Shop(url, config, sum(per_partition.values()))


@pytest.fixture(scope="module")
def shops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Shop]:
    return {
        "small": _build(tmp_path_factory.mktemp("small"), {"p-0": 3, "p-1": 3}),
        "large": _build(tmp_path_factory.mktemp("large"), {"p-0": LARGE, "p-1": 3}),
    }


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[KeyedCounts]:
    """Every store opened from here on counts its requests (one wrapper per open)."""
    return counted_opens(monkeypatch, KeyedCounts)


def _total(made: list[KeyedCounts]) -> Counter[str]:
    out: Counter[str] = Counter()
    for c in made:
        out.update(c.counts)
    return out


def _start_requests(shop: Shop, made: list[KeyedCounts]) -> dict[str, Counter[str]]:
    out = {}
    made.clear()
    with QuiverStore.open(shop.url, shop.config, partition=None, create=False) as s:
        s.run_retention()
        out["read handle + first retention pass"] = _total(made)
    made.clear()
    with QuiverStore.open(shop.url, shop.config, partition="p-0", background=False) as w:
        made[0].reset()  # past the writer's recovery, which lists its own partition
        w.run_retention()
        out["writer's first retention pass"] = _total(made)
    made.clear()
    with Subscription.open(shop.url, "c", config=shop.config) as sub:
        got = sub.poll()
        assert got is not None and len(got.segments) == 2
        out["consumer open + first poll"] = _total(made)
    return out


def test_a_process_start_asks_the_same_of_the_storage_whatever_the_segments_retained(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    small = _start_requests(shops["small"], counted)
    large = _start_requests(shops["large"], counted)
    assert large == small


def test_finding_the_partitions_is_one_listing_of_their_names(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    with QuiverStore.open(shops["large"].url, shops["large"].config, partition=None) as s:
        (c,) = counted
        c.reset()  # past the open (STORE, POLICY)
        assert s.partitions() == ["p-0", "p-1"]
        assert dict(c.counts) == {"list": 1}


def _idle_trigger(sub: Subscription, start: Position) -> None:
    """What the Spark source's ``latestOffset`` does with nothing new."""
    sub.ack(start)
    assert not sub.next_batch_end(start).is_after(start)


def test_an_idle_trigger_and_poll_ask_the_same_whatever_the_segments_retained(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    seen = {}
    for name, shop in shops.items():
        with Subscription.open(shop.url, "idle", config=shop.config) as sub:
            start = sub.acked()
            _idle_trigger(sub, start)  # the first one reads the manifests
            (c,) = counted
            c.reset()
            _idle_trigger(sub, start)
            trigger = Counter(c.counts)
            c.reset()
            assert sub.poll() is None
            seen[name] = (trigger, Counter(c.counts))
        counted.clear()
    assert seen["large"] == seen["small"]


def _idle_sub(shop: Shop, counted: list[KeyedCounts]) -> tuple[Subscription, KeyedCounts]:
    sub = Subscription.open(shop.url, "idle", config=shop.config)
    assert sub.poll() is None  # the first look reads the manifests
    sub._state.last_retention = float("inf")  # no rate-limited pass in what is counted
    (c,) = counted
    c.reset()
    return sub, c


def test_an_idle_poll_catches_the_ack_log_up_and_lists_the_publication_hints_once(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    sub, c = _idle_sub(shops["small"], counted)
    with sub:
        assert sub.poll() is None
        assert c.of("list", "subscribers/log/") == 1
        assert c.of("list", "segments/~hints/") == 1  # names every partition's newest
        assert c.of("list", "segments/") == 0


def test_an_idle_trigger_of_the_spark_source_catches_the_ack_log_up_and_lists_the_hints_once(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    sub, c = _idle_sub(shops["small"], counted)
    with sub:
        start = sub.acked()
        c.reset()
        with sub.one_call():  # as the source's latestOffset does
            _idle_trigger(sub, start)
        assert c.of("list", "subscribers/log/") == 1
        assert c.of("list", "segments/~hints/") == 1  # names every partition's newest
        assert c.of("list", "segments/") == 0


RECORDS = "subscribers/records/"


def _record_reads(c: KeyedCounts) -> int:
    return sum(n for (op, key), n in c.keys.items() if op == "get" and key.startswith(RECORDS))


def test_a_retention_pass_reads_no_record_of_a_registered_subscriber(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    with QuiverStore.open(shops["small"].url, shops["small"].config, partition=None) as s:
        (c,) = counted
        s.run_retention()
        assert c.of("list", RECORDS) == 1
        assert _record_reads(c) == 0


def test_a_second_pass_asks_nothing_of_the_records_while_the_subscribers_stay_the_same(
    shops: dict[str, Shop], counted: list[KeyedCounts]
) -> None:
    with QuiverStore.open(shops["small"].url, shops["small"].config, partition=None) as s:
        (c,) = counted
        s.run_retention()
        c.reset()
        s.run_retention()
        assert c.of("list", RECORDS) == 0 and _record_reads(c) == 0


def test_a_new_subscriber_makes_the_next_pass_look_at_the_records_again(
    tmp_path: Path, counted: list[KeyedCounts]
) -> None:
    shop = _build(tmp_path, {"p-0": 2})
    counted.clear()
    with QuiverStore.open(shop.url, shop.config, partition=None) as s:
        c = counted[0]
        s.run_retention()
        with Subscription.open(shop.url, "new", config=shop.config) as sub:
            sub.start("earliest")
        c.reset()
        s.run_retention()
        assert c.of("list", RECORDS) == 1


def test_a_commit_creates_its_record_without_reading_it_first() -> None:
    from quiver_spark.commits import STORED, CommitLog
    from quiver_spark.objects.memory import MemoryObjects

    c = KeyedCounts(MemoryObjects(f"counts-{next(_BUCKETS)}", "store"))
    log = CommitLog(c, durability=STORED)
    assert log.commit("app", 1, [("p-0", 7)], 3) is True
    assert dict(c.counts) == {"create": 1}
    rerun = CommitLog(c, durability=STORED)  # decided: a rerun
    assert rerun.commit("app", 1, [("p-1", 9)], 3) is False
    assert CommitLog(c, durability=STORED).get("app", 1) is not None
