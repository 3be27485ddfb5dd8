"""A consumer reading newest first (``order="newest"``: a head that follows new data
and a backfill walking the backlog down, ARCHITECTURE.md §19) delivers every committed
row once, whatever the order: across restarts at every step of a Spark-like driver
whose offsets are the positions' JSON, with a segment quarantined under the backfill
cursor, and with retention running while the backfill has not reached its segments.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import ConfigError, DataLossError, OffsetFormatError
from quiver_spark.spark.source_options import parse_source_options
from quiver_spark.subscription import Caps, Subscription
from quiver_spark.subscription.catchup import (
    CatchUpOrder,
    batch_spans,
    parse_head_share,
    resumed_position,
)
from quiver_spark.subscription.position import Position
from tests.engine.spark_like_driver import SparkLikeDriver, doubled, read_keys, until_caught_up
from tests.stores import HAND_SEALED


class Writers:
    """One open writer per partition; every segment holds ``n`` consecutive keys."""

    def __init__(self, root: str, partitions: tuple[str, ...] = ("p-0", "p-1")) -> None:
        self.stores = {
            p: QuiverStore.open(root, HAND_SEALED, partition=p, background=False)
            for p in partitions
        }
        self.next_key = 0
        self.written: list[int] = []
        self.seqs: dict[str, list[int]] = {p: [] for p in partitions}
        self.keys_of: dict[tuple[str, int], list[int]] = {}

    def segment(self, p: str, n: int = 3) -> int:
        keys = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        store = self.stores[p]
        store.append(pa.record_batch({"k": pa.array(keys, type=pa.int64())}))
        meta = store.finalize()
        assert meta is not None
        self.written += keys
        self.seqs[p].append(meta.seq)
        self.keys_of[(p, meta.seq)] = keys
        return meta.seq

    def close(self) -> None:
        for s in self.stores.values():
            s.close()


class Driver(SparkLikeDriver):
    """A Spark-like query of subscriber ``s`` in ``order``, with a segment written by
    ``writers`` before every other plan until key ``fresh_until``."""

    def __init__(
        self, root: str, order: str, caps: Caps, writers: Writers, fresh_until: int
    ) -> None:
        super().__init__(caps)
        self.root, self.order, self.writers = root, order, writers
        self.fresh_until = fresh_until
        """Segments are written while the stream catches up until this key."""
        self.fresh: dict[int, list[int]] = {}
        """The keys written just before batch i was planned."""

    def before_plan(self, i: int) -> None:
        if i and i % 2 == 0 and self.writers.next_key < self.fresh_until:
            p = "p-0" if i % 4 else "p-1"
            self.fresh[i] = self.writers.keys_of[(p, self.writers.segment(p))]

    def run(self, crash_at: int | None, batches: int) -> bool:
        """Up to ``batches`` batches; True when the stream has caught up."""
        with Subscription.open(self.root, "s", order=self.order) as sub:
            return self.run_batches(sub, crash_at, batches)


def p0_segments(root: str, n: int) -> Writers:
    """A writer of partition ``p-0`` alone, which wrote ``n`` segments."""
    writers = Writers(root, ("p-0",))
    for _ in range(n):
        writers.segment("p-0")
    return writers


def first_batch_acked(sub: Subscription, caps: Caps) -> Position:
    """``sub`` started, its first batch read and acknowledged; that batch's end."""
    start = sub.start()
    end = sub.next_batch_end(start, caps)
    read_keys(sub, start, end)
    sub.ack(end)
    return end


def backlog_of(writers: Writers, segments: int = 18) -> None:
    for p in itertools.islice(itertools.cycle(["p-0", "p-1"]), segments):
        writers.segment(p)


def drive(
    root: str, order: str, crash_at: int | None, backlog: int = 18, fresh: int = 12
) -> tuple[Driver, Writers]:
    """A backlog of ``backlog`` segments, then ``fresh`` more written while it drains."""
    writers = Writers(root)
    backlog_of(writers, backlog)
    driver = Driver(root, order, Caps(max_segments=3), writers, 3 * (backlog + fresh))
    try:
        until_caught_up(lambda crash: driver.run(crash, batches=50), crash_at, runs=200)
    finally:
        writers.close()
    return driver, writers


def test_an_uncrashed_run_serves_new_segments_before_the_backlog(tmp_path: Path) -> None:
    driver, writers = drive(str(tmp_path), "newest", None)
    delivered = driver.delivered()
    assert Counter(delivered) == Counter(writers.written)
    # the first batch holds the three newest segments, not the oldest ones
    assert sorted(driver.sink[0]) == list(range(45, 54))
    # a segment written while the backlog drains is in the next batch (the head)
    assert len(driver.fresh) >= 3
    for i, keys in driver.fresh.items():
        assert set(keys) <= set(driver.sink[i]), (i, keys, driver.sink[i])


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_every_row_once_whatever_the_order_with_a_crash_at_every_step(
    tmp_path: Path, order: str
) -> None:
    clean, _ = drive(str(tmp_path / "clean"), order, None, backlog=8, fresh=4)
    for crash_at in range(1, clean.steps + 1):
        driver, writers = drive(str(tmp_path / f"crash-{crash_at}"), order, crash_at, 8, 4)
        delivered = driver.delivered()
        dup = doubled(delivered)
        missed = sorted(set(writers.written) - set(delivered))
        assert not dup and not missed, f"crash at step {crash_at}: doubled {dup}, missed {missed}"
        with QuiverStore.open(str(tmp_path / f"crash-{crash_at}"), partition=None) as store:
            for p, seqs in writers.seqs.items():
                assert all(store.subscribers.is_done("s", p, s) for s in seqs), (crash_at, p)


def poll_all(sub: Subscription, caps: Caps, limit: int = 1000) -> list[list[int]]:
    """Poll, read and acknowledge up to ``limit`` batches; the keys of each."""
    batches = []
    while len(batches) < limit and (batch := sub.poll(caps)) is not None:
        got = []
        for meta in batch.segments:
            for b in sub.read(meta):
                got += b.column("k").to_pylist()
        batches.append(got)
        sub.ack(batch.end)
    return batches


def test_an_embedded_consumer_resumes_its_backlog_from_the_ack_log(tmp_path: Path) -> None:
    root = str(tmp_path)
    writers = Writers(root)
    try:
        backlog_of(writers)
        seen: list[int] = []
        with Subscription.open(root, "e", order="newest") as sub:
            sub.start()
            seen += poll_all(sub, Caps(max_segments=4), limit=1)[0]
            assert sub.acked() == Position({})  # only the newest are done: no mark moved
        assert set(seen) == set(sorted(writers.written)[-12:])  # the four newest
        writers.segment("p-1")
        with Subscription.open(root, "e", order="newest", head_share=0.5) as sub:
            batches = poll_all(sub, Caps(max_segments=4))
            assert set(batches[0]) >= set(writers.keys_of[("p-1", writers.seqs["p-1"][-1])])
            seen += [k for b in batches for k in b]
        assert Counter(seen) == Counter(writers.written)
        # switched back to oldest with a backlog left: nothing is skipped
        backlog_of(writers)
        with Subscription.open(root, "e", order="newest") as sub:
            seen += poll_all(sub, Caps(max_segments=5), limit=1)[0]
        with Subscription.open(root, "e") as sub:
            seen += [k for b in poll_all(sub, Caps(max_segments=2)) for k in b]
        assert Counter(seen) == Counter(writers.written)
    finally:
        writers.close()


def test_a_quarantined_segment_under_the_backfill_cursor_is_reported_never_skipped(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    writers = p0_segments(root, 8)
    try:
        with Subscription.open(root, "q", order="newest") as sub:
            end = first_batch_acked(sub, Caps(max_segments=3))
            assert end == Position({"p-0": 8}, {"p-0": (1, 5)})
        writers.stores["p-0"].segment_location.quarantine("p-0", 4, "test: damaged")
        with Subscription.open(root, "q", order="newest") as sub:
            start, end = end, sub.next_batch_end(end, Caps(max_segments=3))
            assert end == Position({"p-0": 8}, {"p-0": (1, 2)})  # 5, 4 and 3
            with pytest.raises(DataLossError, match="quarantine"):
                read_keys(sub, start, end)
        seen: list[int] = []
        with Subscription.open(root, "q", order="newest", fail_on_data_loss=False) as sub:
            seen += [k for b in poll_all(sub, Caps(max_segments=3)) for k in b]
            assert [e["seq"] for e in sub.lost.report()["segments"]] == [4]
            assert all(sub.registry.is_done("q", "p-0", s) for s in range(1, 9))
        lost = set(writers.keys_of[("p-0", 4)])
        assert sorted(seen) == sorted(set(writers.written[:24]) - set(range(15, 24)) - lost)
    finally:
        writers.close()


def test_retention_keeps_what_the_backfill_cursor_still_needs(tmp_path: Path) -> None:
    root = str(tmp_path)
    writers = p0_segments(root, 10)
    try:
        with Subscription.open(root, "r", order="newest") as sub:
            end = first_batch_acked(sub, Caps(max_segments=4))
            assert end.backlog == {"p-0": (1, 6)}
            sub.store.run_retention()  # after the acknowledgement
            kept = set(sub.location.published_seqs("p-0"))
            assert set(range(1, 7)) <= kept, kept  # the backlog is all there
        # retention under a policy that drops unacknowledged data races the backfill:
        # the seqs it condemns are passed over as dropped, never lost, never twice
        store = writers.stores["p-0"]
        with store.subscribers.exclusive() as reg:
            reg.condemn({"p-0": [5, 6]})
        store.segment_location.delete("p-0", [5, 6])
        seen: list[int] = []
        with Subscription.open(root, "r", order="newest") as sub:
            mid = sub.next_batch_end(end, Caps(max_segments=1))
            assert mid == Position({"p-0": 10}, {"p-0": (1, 3)})  # 6, 5 gone, 4 read
            seen += read_keys(sub, end, mid)
            assert sub.lost.report()["dropped"] == 2
            sub.ack(mid)
            seen += [k for b in poll_all(sub, Caps(max_segments=1)) for k in b]
        expected = [k for s in (1, 2, 3, 4) for k in writers.keys_of[("p-0", s)]]
        assert sorted(seen) == expected
    finally:
        writers.close()


def test_positions_with_a_backlog_round_trip_and_old_ones_still_read() -> None:
    pos = Position({"p-0": 9, "p-1": 4}, {"p-0": (3, 6)})
    raw = pos.to_json()
    assert raw == {"v": 2, "segments": {"p-0": 9, "p-1": 4}, "backlog": {"p-0": [3, 6]}}
    assert Position.from_json(raw) == pos
    assert Position({"p-0": 9}).to_json() == {"v": 1, "segments": {"p-0": 9}}
    assert Position.from_json({"v": 1, "segments": {"p-0": 9}}).backlog == {}
    for bad in ({"p-0": (0, 2)}, {"p-0": (3, 9)}, {"p-1": (1, 1)}, {"p-0": [4, 3]}):
        with pytest.raises(OffsetFormatError):
            Position({"p-0": 9}, bad)
    with pytest.raises(OffsetFormatError, match="out of order"):
        batch_spans(Position({"p-0": 9}), Position({"p-0": 9}, {"p-0": (2, 3)}))


def test_a_batch_is_the_head_range_then_the_backfill_range() -> None:
    start = Position({"p-0": 9, "p-1": 2}, {"p-0": (3, 6)})
    end = Position({"p-0": 12, "p-1": 7}, {"p-0": (3, 4), "p-1": (3, 5)})
    assert batch_spans(start, end) == [("p-0", 10, 12), ("p-1", 6, 7), ("p-0", 5, 6)]
    assert batch_spans(end, Position({"p-0": 12, "p-1": 7})) == [
        ("p-1", 3, 5),
        ("p-0", 3, 4),
    ]
    assert end.covers("p-0", 5) and not end.covers("p-0", 4) and end.covers("p-0", 2)
    assert end.is_after(start) and not start.is_after(end)


def test_the_order_and_share_refuse_a_bad_value_naming_what_is_allowed() -> None:
    assert CatchUpOrder.parse(" Newest ") is CatchUpOrder.NEWEST
    with pytest.raises(ConfigError, match=r"oldest .*or newest"):
        CatchUpOrder.parse("lifo", "catchUpOrder")
    assert parse_head_share("0.5") == 0.5
    for bad in ("0", "1.5", "most", "nan"):
        with pytest.raises(ConfigError, match="greater than 0 and at most 1"):
            parse_head_share(bad)


def test_a_subscription_refuses_a_bad_head_share_before_it_plans(tmp_path: Path) -> None:
    root = str(tmp_path)
    QuiverStore.open(root, HAND_SEALED, partition="p-0", background=False).close()
    for bad in (0, -1, 2, float("nan"), "most"):
        with pytest.raises(ConfigError, match="greater than 0 and at most 1"):
            Subscription.open(root, "s", order="newest", head_share=bad)  # type: ignore[arg-type]
    with Subscription.open(root, "s", order="newest", head_share=1) as sub:
        assert sub.head_share == 1.0


def test_the_ack_log_tells_an_embedded_consumer_where_its_cursors_are() -> None:
    marks = {"p-0": 2, "p-1": 4, "p-2": 0}
    done = {"p-0": {7, 8, 9, 4}, "p-1": set(), "p-2": {1, 2}}
    pos = resumed_position(marks.__getitem__, done.__getitem__, marks)
    assert pos == Position({"p-0": 9, "p-1": 4, "p-2": 2}, {"p-0": (3, 6)})


def test_the_catch_up_options_of_a_stream_refuse_a_bad_value_in_one_line(tmp_path: Path) -> None:
    base = {"path": str(tmp_path), "subscriber": "s"}
    opts = parse_source_options(
        {**base, "catchUpOrder": "Newest", "catchUpHeadShare": "0.5"}, streaming=True
    )
    assert opts.catch_up_order is CatchUpOrder.NEWEST and opts.head_share == 0.5
    assert parse_source_options(base, streaming=True).catch_up_order is CatchUpOrder.OLDEST
    with pytest.raises(ConfigError) as err:
        parse_source_options({**base, "catchUpOrder": "lifo"}, streaming=True)
    assert str(err.value) == (
        "invalid value for option 'catchUpOrder': 'lifo'; allowed: oldest (the default) or newest"
    )
    with pytest.raises(ConfigError, match="'catchUpHeadShare': '2'"):
        parse_source_options({**base, "catchUpHeadShare": "2"}, streaming=True)
    with pytest.raises(ConfigError, match=r"spark\.readStream"):
        parse_source_options({"path": str(tmp_path), "catchUpOrder": "newest"}, streaming=False)


def test_planning_never_reads_the_metadata_of_served_segments_again(tmp_path: Path) -> None:
    root = str(tmp_path)
    writers = p0_segments(root, 10)
    try:
        with Subscription.open(root, "m", order="newest") as sub:
            # the acknowledgement forgets the cached metadata of what it acknowledged
            end = first_batch_acked(sub, Caps(max_segments=4))
            reads: list[int] = []
            real = sub.location.published_meta

            def counted(p: str, seq: int) -> object:
                reads.append(seq)
                return real(p, seq)

            sub.location.published_meta = counted  # type: ignore[method-assign]
            nxt = sub.next_batch_end(end, Caps(max_segments=4))
            assert nxt == Position({"p-0": 10}, {"p-0": (1, 2)})
            assert not [s for s in reads if s > 6], reads  # the head's seqs stay served
    finally:
        writers.close()
