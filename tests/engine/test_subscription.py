"""The engine's subscription API: what the Spark source decides, without a JVM."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.errors import DataLossError
from quiver_spark.subscription import Caps, StartPosition, Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.stores import int_segments

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=60))


def rows(lo: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"k": pa.array(range(lo, lo + n), type=pa.int64())})


def fill(root: Path, partition: str, segments: list[tuple[int, int]]) -> None:
    int_segments(root, segments, partition=partition)


def keys(sub: Subscription, metas: list) -> list[int]:
    out: list[int] = []
    for m in metas:
        for b in sub.read(m):
            out.extend(pc.cast(b.column("k"), "int64").to_pylist())
    return out


def test_an_embedded_consumer_reads_every_row_once_and_reclaims_disk(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 10), (10, 10), (20, 10)])
    fill(tmp_path, "p-1", [(100, 5), (105, 5)])
    seen: list[int] = []
    with Subscription.open(str(tmp_path), "forwarder") as sub:
        while (batch := sub.poll(Caps(max_segments=2))) is not None:
            assert len(batch.segments) <= 2
            seen.extend(keys(sub, batch.segments))
            sub.ack(batch.end)
        assert sub.poll() is None
    assert sorted(seen) == [*range(30), *range(100, 110)] and len(seen) == len(set(seen))
    # everything acknowledged by the only subscriber is gone from disk
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as s:
        assert s.segments() == []


def test_a_restarted_consumer_resumes_after_its_acknowledged_position(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 3), (3, 3)])
    with Subscription.open(str(tmp_path), "r") as sub:
        batch = sub.poll(Caps(max_segments=1))
        assert batch is not None and keys(sub, batch.segments) == [0, 1, 2]
        sub.ack(batch.end)
        batch = sub.poll(Caps(max_segments=1))
        assert batch is not None  # read but never acknowledged: delivered again
    fill(tmp_path, "p-0", [(6, 3)])
    with Subscription.open(str(tmp_path), "r") as sub:
        assert sub.acked() == Position({"p-0": 1})
        batch = sub.poll()
        assert batch is not None and keys(sub, batch.segments) == [3, 4, 5, 6, 7, 8]


def test_plan_admits_oldest_first_across_partitions_under_every_cap(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 100)])
    fill(tmp_path, "p-1", [(100, 100)])
    fill(tmp_path, "p-0", [(200, 100)])
    with Subscription.open(str(tmp_path), "r") as sub:
        start = sub.start()
        assert start == Position({"p-0": 0, "p-1": 0})
        assert sub.next_batch_end(start, Caps(max_segments=2)) == Position({"p-0": 1, "p-1": 1})
        assert sub.next_batch_end(start, Caps(max_rows=150)) == Position({"p-0": 1, "p-1": 0})
        one = sub.meta("p-0", 1)
        assert one is not None
        assert sub.next_batch_end(start, Caps(max_bytes=1)) == Position(
            {"p-0": 1, "p-1": 0}
        )  # >= 1
        assert sub.next_batch_end(start, Caps(), until=Position({"p-0": 1})) == Position(
            {"p-0": 1, "p-1": 0}
        )
        assert sub.latest == Position({"p-0": 2, "p-1": 1})


def test_start_positions_for_new_and_known_subscribers(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 1), (1, 1), (2, 1)])
    with Subscription.open(str(tmp_path), "late") as sub:
        assert sub.start(StartPosition.LATEST) == Position({"p-0": 3})
    with Subscription.open(str(tmp_path), "early") as sub:
        assert sub.start() == Position({"p-0": 0})
        sub.ack(Position({"p-0": 2}))
    with Subscription.open(str(tmp_path), "early") as sub:  # known: resumes where acked
        assert sub.start() == Position({"p-0": 2})


def test_a_published_segment_that_vanished_is_data_loss_per_policy(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 1), (1, 1), (2, 1)])
    seg = tmp_path / "segments" / "p-0"
    (seg / f"{2:020d}.meta").unlink()  # gone by hand: no retention record, no quarantine
    with Subscription.open(str(tmp_path), "strict") as sub:
        start = sub.start()
        end = sub.next_batch_end(start)
        assert end == Position({"p-0": 3})
        with pytest.raises(DataLossError, match="segment 2 of partition p-0") as err:
            sub.segments(start, end)
        assert err.value.kind == "missing"
    with Subscription.open(str(tmp_path), "lenient", fail_on_data_loss=False) as sub:
        start = sub.start()
        metas = sub.segments(start, sub.next_batch_end(start))
        assert [m.seq for m in metas] == [1, 3]
        report = sub.lost.report()
        assert report["lost"] == 1 and report["segments"][0]["seq"] == 2


def test_a_segment_retention_deleted_is_skipped_as_dropped(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 1), (1, 1)])
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as s:
        s.subscribers.register("a")
        s.subscribers.register("b")
    with Subscription.open(str(tmp_path), "a") as a:
        start = Position({"p-0": 0})
        a.ack(Position({"p-0": 2}))
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as s:
        s.subscribers.condemn({"p-0": [1]})  # what drop_oldest records before deleting
        s.segment_location.delete("p-0", [1])
    with Subscription.open(str(tmp_path), "b") as b:
        metas = b.segments(start, Position({"p-0": 2}))
        assert [m.seq for m in metas] == [2]
        assert b.lost.report()["dropped"] == 1


def test_one_live_consumer_per_subscriber(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 1)])
    code = f"""
        from quiver_spark.subscription import Subscription
        try:
            Subscription.open({str(tmp_path)!r}, "r")
        except Exception as e:
            print(type(e).__name__, e)
        """
    with Subscription.open(str(tmp_path), "r"):
        out = run_python(code, check=False, capture=True)
        assert "SubscriberError" in out.stdout and "already has a live consumer" in out.stdout
    with Subscription.open(str(tmp_path), "r") as again:  # released on close
        again.start()
        assert again.registered()


def test_nacked_segments_stay_pending(tmp_path: Path) -> None:
    fill(tmp_path, "p-0", [(0, 1), (1, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        sub.start()
        sub.nack("p-0", [1])
        assert sub.registry.nacked("r", "p-0") == frozenset({1})
        assert sub.registry.pending("r", "p-0", [1, 2]) == [1, 2]


def test_a_corrupt_meta_is_data_loss_naming_the_file(tmp_path: Path) -> None:
    from tests.damage import flip_byte

    fill(tmp_path, "p-0", [(0, 1), (1, 1)])
    meta = tmp_path / "segments" / "p-0" / f"{1:020d}.meta"
    flip_byte(meta, 20)
    with Subscription.open(str(tmp_path), "r") as sub:
        start = sub.start()
        with pytest.raises(DataLossError, match="corrupt") as err:
            sub.segments(start, sub.next_batch_end(start))
        assert err.value.evidence == str(meta)


def test_a_start_by_time_begins_at_the_first_segment_with_a_row_at_or_after_it(
    tmp_path: Path,
) -> None:
    import time

    fill(tmp_path, "p-0", [(0, 1), (1, 1)])
    time.sleep(0.01)
    cut = time.time_ns()
    time.sleep(0.01)
    fill(tmp_path, "p-0", [(2, 1), (3, 1)])
    fill(tmp_path, "p-1", [(10, 1)])
    with Subscription.open(str(tmp_path), "since") as sub:
        start = sub.start(since_ns=cut)
        assert start == Position({"p-0": 2, "p-1": 0})
        assert keys(sub, sub.segments(start, sub.next_batch_end(start))) == [2, 3, 10]
    with Subscription.open(str(tmp_path), "future") as sub:
        assert sub.start(since_ns=time.time_ns() + 10**12) == Position({"p-0": 4, "p-1": 1})


def test_planning_between_full_listings_probes_new_seqs_instead_of_listing(
    tmp_path: Path,
) -> None:
    fill(tmp_path, "p-0", [(i, 1) for i in range(20)])
    fill(tmp_path, "p-1", [(100, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        start = sub.start()
        first = sub.next_batch_end(start)  # a full listing
        assert first == Position({"p-0": 20, "p-1": 1})
        calls = {"list": 0, "reads": 0, "rounds": 0}
        loc = sub.location
        real_list, real_read = loc.published_seqs, loc._b.read_many

        def listing(p: str) -> list[int]:
            calls["list"] += 1
            return real_list(p)

        def read_many(paths: list[str]) -> dict[str, bytes | None]:
            calls["rounds"] += 1
            calls["reads"] += len(paths)
            return real_read(paths)

        loc.published_seqs = listing  # type: ignore[method-assign]
        loc._b.read_many = read_many  # type: ignore[method-assign]
        fill(tmp_path, "p-0", [(50, 1), (51, 1)])
        assert sub.next_batch_end(first) == Position({"p-0": 22, "p-1": 1})
        # no read of the quarantine mark (one listing of the publication hints names its
        # version, §12) and none of p-1 (its hint announces nothing new): one read per
        # new segment of p-0 and one beyond; a round's reads go together (one request
        # each, sent at once)
        assert calls == {"list": 0, "reads": 2 + 1, "rounds": 3}


def test_a_segment_after_a_hole_is_planned_at_the_next_trigger_without_a_listing(
    tmp_path: Path,
) -> None:
    """Holes in the seqs a consumer probes: one the ack log records deleted (another
    process's retention, before this consumer saw it) is passed over; one moved aside
    by a quarantine replaces the location's quarantine mark, so the next plan lists and
    reports it. Neither waits for the periodic listing."""
    fill(tmp_path, "p-0", [(0, 1), (1, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(sub.start())
        assert first == Position({"p-0": 2})
        listings = {"n": 0}
        real = sub.location.published_seqs

        def listing(p: str) -> list[int]:
            listings["n"] += 1
            return real(p)

        sub.location.published_seqs = listing  # type: ignore[method-assign]
        fill(tmp_path, "p-0", [(2, 1), (3, 1), (4, 1), (5, 1)])  # seqs 3, 4, 5, 6
        with QuiverStore.open(str(tmp_path), partition=None, create=False) as other:
            with other.subscribers.exclusive() as reg:  # another process's pass
                reg.condemn({"p-0": [3]})
            other.segment_location.delete("p-0", [3])
        end = sub.next_batch_end(first)
        assert end == Position({"p-0": 6}) and listings["n"] == 0
        assert keys(sub, sub.segments(first, end)) == [3, 4, 5]
        assert sub.metrics.total("quiver.source.dropped_segments_total") == 1  # reported
        fill(tmp_path, "p-0", [(6, 1), (7, 1)])  # seqs 7, 8, not seen yet
        with QuiverStore.open(str(tmp_path), partition=None, create=False) as other:
            other.segment_location.quarantine("p-0", 7, "test: damaged")
        end = sub.next_batch_end(Position({"p-0": 6}))
        assert end == Position({"p-0": 8}) and listings["n"] > 0  # the mark changed: listed
        with pytest.raises(DataLossError, match="quarantine"):
            sub.segments(Position({"p-0": 6}), end)


def test_a_seq_removed_by_hand_is_passed_at_the_periodic_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hole no tool made (files removed by hand: no ack-log record, no quarantine
    mark) holds a consumer's probing until the listing every FULL_LISTING_PERIOD_S,
    which then plans past it and reports the missing seq."""
    import quiver_spark.subscription.planning as planning

    fill(tmp_path, "p-0", [(0, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(sub.start())
        assert first == Position({"p-0": 1})
        fill(tmp_path, "p-0", [(1, 1), (2, 1)])  # seqs 2, 3
        for suffix in ("meta", "arrow"):
            (tmp_path / "segments" / "p-0" / f"{2:020d}.{suffix}").unlink()
        assert sub.next_batch_end(first) == first  # probing stops at the hole
        later = planning.time.monotonic() + planning.FULL_LISTING_PERIOD_S + 1
        monkeypatch.setattr(planning.time, "monotonic", lambda: later)
        end = sub.next_batch_end(first)
        assert end == Position({"p-0": 3})
        with pytest.raises(DataLossError, match="missing"):
            sub.segments(first, end)
