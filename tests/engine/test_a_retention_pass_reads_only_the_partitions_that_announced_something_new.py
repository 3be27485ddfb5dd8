"""A long-lived retention pass (a writer's after each seal, a subscription's after an
acknowledgement) learns what was published since its last pass from one listing of
the publication hints (ARCHITECTURE.md §12, §15.1): a partition whose newest hint is
not above the highest seq the pass already knows costs no request, one whose newest
hint the MANIFEST copy at hand already covers (the writer's own publication) costs
none either, and one that announced something new costs one read of its MANIFEST (no
HEAD first). So a pass costs the same few requests whatever the partitions, a
segment another writer sealed is known (and deleted once acknowledged) by the next
pass, and a hint listed before its publication landed makes the partition read again
until it has. A segment published with no hint at all (a writer from before hints)
is learned by the listing survey, every ``RESURVEY_PERIOD_S`` at the latest."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.layout import hint_name
from quiver_spark.objects import ObjectStore
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.retained import RESURVEY_PERIOD_S
from quiver_spark.segment import SegmentLocation
from quiver_spark.subscription import Subscription
from tests.stores import counted_opens, passes_by_w0_only, wal_in

_BUCKETS = itertools.count()


class _Keyed(CountingObjects):
    """Counts as CountingObjects does, and keeps every GET and HEAD with its key."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reads: list[tuple[str, str]] = []

    def get(self, key: str):  # type: ignore[no-untyped-def]
        self.reads.append(("GET", key))
        return super().get(key)

    def head(self, key: str) -> str | None:
        self.reads.append(("HEAD", key))
        return super().head(key)

    def info(self, key: str):  # type: ignore[no-untyped-def]
        self.reads.append(("HEAD", key))
        return super().info(key)

    def manifests(self) -> list[tuple[str, str]]:
        return [(op, k) for op, k in self.reads if k.endswith("/MANIFEST")]


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> list[_Keyed]:
    return counted_opens(monkeypatch, _Keyed)


def _seal(w: QuiverStore) -> None:
    w.append(pa.record_batch({"id": pa.array(range(3), pa.int64())}))
    w.flush()
    w.finalize()


def _write(url: str, config: StoreConfig, pid: str) -> None:
    with QuiverStore.open(url, config, partition=pid, background=False) as w:
        _seal(w)


def _store(tmp: Path, partitions: int) -> tuple[str, StoreConfig]:
    """``partitions`` partitions of one segment each, and a subscriber that read nothing
    (every segment is kept)."""
    url = f"memory://passes-{next(_BUCKETS)}/store"
    config = wal_in(tmp / "wal")
    for k in range(partitions):
        _write(url, config, f"w-{k}")
    with Subscription.open(url, "slow", config=config) as slow:
        slow.start("earliest")
    return url, config


def _seqs(w: QuiverStore, pid: str) -> list[int]:
    return [s.seq for s in w._retention.index.segments(pid)]


def _bucket(url: str) -> MemoryObjects:
    bucket, prefix = url.removeprefix("memory://").split("/", 1)
    return MemoryObjects(bucket, prefix)


@pytest.mark.parametrize("partitions", [3, 24])
def test_the_pass_after_a_seal_reads_no_manifest_and_costs_the_same_whatever_the_partitions(
    tmp_path: Path, keyed: list[_Keyed], partitions: int
) -> None:
    url, config = _store(tmp_path, partitions)
    keyed.clear()
    with QuiverStore.open(url, config, partition="w-0", background=False) as w:
        (objects,) = keyed
        w.run_retention()  # the first pass surveys every partition
        costs = []
        for n in (2, 3):
            _seal(w)
            objects.reads.clear()
            objects.counts.clear()
            w.run_retention()
            assert objects.manifests() == []  # its own publication is in the copy at hand
            assert _seqs(w, "w-0") == list(range(1, n + 1))
            costs.append(dict(objects.counts))
        assert costs[0] == costs[1]
        assert costs[0].get("head", 0) == 0, costs
        assert sum(costs[0].values()) <= 6, costs  # the hint listing and the ack log


def test_a_segment_another_writer_sealed_is_known_by_the_next_pass_for_one_manifest_read(
    tmp_path: Path, keyed: list[_Keyed]
) -> None:
    url, config = _store(tmp_path, 4)
    keyed.clear()
    with QuiverStore.open(url, config, partition="w-0", background=False) as w:
        (objects,) = keyed
        w.run_retention()
        _write(url, config, "w-2")
        objects.reads.clear()
        w.run_retention()
        assert objects.manifests() == [("GET", "partitions/w-2/MANIFEST")]
        assert _seqs(w, "w-2") == [1, 2]


def test_a_segment_every_subscriber_acknowledged_in_another_partition_goes_at_the_next_pass(
    tmp_path: Path,
) -> None:
    url = f"memory://passes-{next(_BUCKETS)}/store"
    config = wal_in(tmp_path / "wal")
    for k in range(3):
        _write(url, config, f"w-{k}")
    with passes_by_w0_only(url, config, "only") as (sub, w):
        _write(url, config, "w-1")  # sealed after w's last pass
        while (got := sub.poll()) is not None:
            sub.ack(got.end)
        result = w.run_retention()
        assert result.deleted.get("w-1") == [1, 2]
        assert _seqs(w, "w-1") == []


def test_a_hint_listed_before_its_publication_landed_has_the_partition_read_until_it_has(
    tmp_path: Path, keyed: list[_Keyed]
) -> None:
    url, config = _store(tmp_path, 3)
    keyed.clear()
    with QuiverStore.open(url, config, partition="w-0", background=False) as w:
        (objects,) = keyed
        w.run_retention()
        _bucket(url).put(f"segments/~hints/{hint_name('w-1', 2)}", b"")  # announced only
        for _ in range(2):
            objects.reads.clear()
            w.run_retention()
            assert ("GET", "partitions/w-1/MANIFEST") in objects.manifests()
            assert _seqs(w, "w-1") == [1]  # nothing made up
        _write(url, config, "w-1")  # the publication lands
        w.run_retention()
        assert _seqs(w, "w-1") == [1, 2]
        objects.reads.clear()
        w.run_retention()
        assert objects.manifests() == []  # passed: not read any more


def test_a_segment_published_without_a_hint_is_learned_by_the_listing_survey(
    tmp_path: Path, keyed: list[_Keyed]
) -> None:
    url, config = _store(tmp_path, 3)
    keyed.clear()
    with QuiverStore.open(url, config, partition="w-0", background=False) as w:
        w.run_retention()
        with pytest.MonkeyPatch.context() as mp:  # a writer from before hints
            mp.setattr(SegmentLocation, "_announce", lambda self, p, s: None)
            _write(url, config, "w-2")
        w.run_retention()
        assert _seqs(w, "w-2") == [1]  # its old hint announces nothing new: not read
        index = w._retention.index
        index._listed_at = (index._listed_at or 0.0) - RESURVEY_PERIOD_S - 1  # the period passed
        w.run_retention()
        assert _seqs(w, "w-2") == [1, 2]
