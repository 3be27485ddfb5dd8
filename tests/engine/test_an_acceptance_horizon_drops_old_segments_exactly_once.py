"""A subscriber's acceptance horizon (``Subscription(horizon=...)``, the source option
``acceptanceHorizon``, ARCHITECTURE.md §19): a segment whose newest row was ingested
longer ago than the horizon when its batch was planned is recorded ``dropped`` for the
subscriber, never delivered and never silently skipped; newer ones are delivered.
The decision travels in the batch's end position (its ``cutoff_ns``), so a replay
after a crash at any step reads the same rows whatever the clock says then, and a
failed drop record loses or doubles nothing. Off by default.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.status import collect_status
from quiver_spark.errors import ConfigError, OffsetFormatError
from quiver_spark.metrics import SOURCE_ACKED, SOURCE_HORIZON_DROPPED, SOURCE_HORIZON_DROPPED_ROWS
from quiver_spark.spark.offsets import CUTOFF_VERSION, QuiverOffset
from quiver_spark.spark.source_options import parse_source_options
from quiver_spark.subscribers import records
from quiver_spark.subscription import Caps, Subscription
from quiver_spark.subscription.horizon import parse_horizon
from quiver_spark.subscription.position import Position
from tests.engine.spark_like_driver import SparkLikeDriver, doubled, read_keys, until_caught_up
from tests.stores import int_segments

HOUR_NS = 3600 * 10**9
PARTS = ("p-0", "p-1")


class Store:
    """Three old segments per partition, then (after the cutoff ``mid``) two new ones;
    every segment holds three consecutive keys."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.keys: dict[tuple[str, int], list[int]] = {}
        self.old: list[int] = []
        self.new: list[int] = []
        key = 0
        last = 0
        for p in PARTS:
            for meta in int_segments(self.root, [(key + 3 * i, 3) for i in range(3)], partition=p):
                self.keys[(p, meta.seq)] = list(range(key + 3 * (meta.seq - 1), key + 3 * meta.seq))
                last = max(last, meta.max_ingestion_ns)
            key += 100
        self.mid = last + 1
        """Every old row was ingested before it, every new one at or after it."""
        while time.time_ns() <= self.mid:
            pass
        for p in PARTS:
            base = PARTS.index(p) * 100 + 9
            for meta in int_segments(self.root, [(base, 3), (base + 3, 3)], partition=p):
                assert meta.min_ingestion_ns >= self.mid
                lo = base + 3 * (meta.seq - 4)
                self.keys[(p, meta.seq)] = list(range(lo, lo + 3))
        for (_p, seq), keys in self.keys.items():
            (self.old if seq <= 3 else self.new).extend(keys)

    def clock(self, later_ns: int = 0) -> int:
        """A planning clock one hour past ``mid`` (the cutoff of a 1h horizon), plus
        ``later_ns``."""
        return self.mid + HOUR_NS + later_ns


class Driver(SparkLikeDriver):
    """A Spark-like query of subscriber ``s`` reading batches of three segments with
    ``horizon``. Each run (a restart) plans with a clock ``later_ns`` on than the run
    before."""

    def __init__(self, store: Store, order: str, horizon: str | None = "1h") -> None:
        super().__init__(Caps(max_segments=3))
        self.store, self.order, self.horizon = store, order, horizon
        self.runs = 0

    def run(self, crash_at: int | None = None, later_ns: int = 0) -> bool:
        self.runs += 1
        with Subscription.open(self.store.root, "s", order=self.order, horizon=self.horizon) as sub:
            sub.clock = lambda: self.store.clock(later_ns * (self.runs - 1))
            return self.run_batches(sub, crash_at, batches=50, start_at="earliest")


def drive(store: Store, order: str, crash_at: int | None = None, later_ns: int = 0) -> Driver:
    driver = Driver(store, order)
    until_caught_up(lambda crash: driver.run(crash, later_ns), crash_at, runs=100)
    return driver


def done_everywhere(root: str) -> bool:
    with QuiverStore.open(root, partition=None) as s:
        return all(s.subscribers.is_done("s", p, seq) for p in PARTS for seq in range(1, 6))


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_old_segments_are_recorded_dropped_and_new_ones_delivered(
    tmp_path: Path, order: str
) -> None:
    store = Store(tmp_path)
    driver = drive(store, order)
    assert sorted(driver.delivered()) == sorted(store.new)
    assert all(o.get("cutoff_ns") == store.mid for o in driver.offsets)
    assert done_everywhere(store.root)  # the dropped ones are done: retention may go
    with QuiverStore.open(store.root, partition=None) as s:
        assert all(s.subscribers.done_by_all(p, seq) for p in PARTS for seq in range(1, 6))
        rec = records.read_record(s.objects, "s")
        assert rec is not None
        assert (rec.horizon_dropped_segments, rec.horizon_dropped_rows) == (6, 18)
        doc = collect_status(s)
    row = doc["subscribers"][0]
    assert (row["horizon_dropped_segments"], row["horizon_dropped_rows"]) == (6, 18)
    assert row["lag_segments"] == 0


def test_the_dropped_segments_are_counted_in_the_consumer_metrics(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with Subscription.open(store.root, "s", order="newest", horizon=3600) as sub:
        sub.clock = store.clock
        start = sub.start("earliest")
        end = sub.next_batch_end(start)
        assert sorted(read_keys(sub, start, end)) == sorted(store.new)
        assert sub.ack(end) == 10
        assert sub.metrics.get(SOURCE_HORIZON_DROPPED, subscriber="s") == 6
        assert sub.metrics.get(SOURCE_HORIZON_DROPPED_ROWS, subscriber="s") == 18
        assert sub.metrics.get(SOURCE_ACKED, subscriber="s") == 4
        prom = sub.metrics.to_prometheus()
    assert 'quiver_source_horizon_dropped_segments_total{subscriber="s"} 6.0' in prom


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_a_replay_after_a_crash_at_any_step_reads_the_same_rows_whatever_the_clock(
    tmp_path: Path, order: str
) -> None:
    """Each restart plans with a clock 30 minutes later: a replayed batch still reads
    what its first run read (its offset holds the cutoff), and every row is delivered
    once or recorded dropped, never both."""
    clean = drive(Store(tmp_path / "clean"), order)
    for crash_at in range(1, clean.steps + 1):
        store = Store(tmp_path / f"crash-{crash_at}")
        driver = drive(store, order, crash_at, later_ns=HOUR_NS // 2)
        delivered = driver.delivered()
        dup = doubled(delivered)
        assert not dup, f"crash at step {crash_at}: doubled {dup}"
        assert not set(delivered) & set(store.old), f"crash at {crash_at}: old rows delivered"
        assert done_everywhere(store.root), f"crash at step {crash_at}: a seq left undone"
        with QuiverStore.open(store.root, partition=None) as s:
            rec = records.read_record(s.objects, "s")
        assert rec is not None
        # what was not delivered was recorded dropped: nothing silently skipped
        assert rec.horizon_dropped_rows + len(delivered) == len(store.keys) * 3, crash_at


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_no_horizon_is_the_default_and_drops_nothing(tmp_path: Path, order: str) -> None:
    store = Store(tmp_path)
    driver = Driver(store, order, horizon=None)
    assert driver.run()
    assert sorted(driver.delivered()) == sorted(store.old + store.new)
    assert all("cutoff_ns" not in o and o["v"] in (1, 2) for o in driver.offsets)
    with QuiverStore.open(store.root, partition=None) as s:
        rec = records.read_record(s.objects, "s")
        assert rec is not None and rec.horizon_dropped_segments == 0
        assert "horizon_dropped_segments" not in rec.to_body()  # the record's bytes as before


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_a_restart_never_delivers_a_dropped_segment(tmp_path: Path, order: str) -> None:
    store = Store(tmp_path)
    with Subscription.open(store.root, "s", order=order, horizon="1h") as sub:
        sub.clock = store.clock
        sub.start("earliest")
        got = []
        while (batch := sub.poll(Caps(max_segments=2))) is not None:
            got += [
                k for m in batch.segments for b in sub.read(m) for k in b.column("k").to_pylist()
            ]
            sub.ack(batch.end)
    assert sorted(got) == sorted(store.new)
    with Subscription.open(store.root, "s", order=order) as sub:  # no horizon now
        assert sub.poll() is None


def test_a_failed_drop_record_loses_and_doubles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path)
    with Subscription.open(store.root, "s", order="newest", horizon="1h") as sub:
        sub.clock = store.clock
        start = sub.start("earliest")
        end = Position.from_json(sub.next_batch_end(start).to_json())
        first = read_keys(sub, start, end)
        real = sub.registry.record_many

        def failing(*args: object, **kwargs: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(sub.registry, "record_many", failing)
        with pytest.raises(OSError):
            sub.ack(end)
        monkeypatch.setattr(sub.registry, "record_many", real)
        assert not any(sub.registry.is_done("s", p, s) for p in PARTS for s in range(1, 6))
        sub.clock = lambda: store.clock(100 * HOUR_NS)  # later: would drop everything
        assert read_keys(sub, start, end) == first  # the replay: the offset decides
        assert sub.ack(end) == 10
    assert sorted(first) == sorted(store.new)
    assert done_everywhere(store.root)


def test_a_plan_that_moves_nothing_keeps_its_start_whatever_the_clock(tmp_path: Path) -> None:
    """Spark runs a batch when ``latestOffset`` differs from its start: a new cutoff alone
    must not make one."""
    store = Store(tmp_path)
    with Subscription.open(store.root, "s", horizon="1h") as sub:
        sub.clock = store.clock
        start = sub.start("earliest")
        end = sub.next_batch_end(start)
        sub.ack(end)
        sub.clock = lambda: store.clock(HOUR_NS)
        assert sub.next_batch_end(end) is end


@pytest.mark.parametrize("value", ["0", "-1h", "6 hours", "soon", "0s", True])
def test_a_bad_horizon_is_refused_naming_what_is_allowed(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options(
            {"path": str(tmp_path), "subscriber": "s", "acceptanceHorizon": value},
            streaming=True,
        )
    msg = str(err.value)
    assert "'acceptanceHorizon'" in msg and "such as 30m, 6h or 7d" in msg and "none" in msg
    with pytest.raises(ConfigError, match="such as 30m, 6h or 7d"):
        parse_horizon(value, "horizon")


def test_horizon_values_and_the_default(tmp_path: Path) -> None:
    opts = {"path": str(tmp_path), "subscriber": "s"}
    assert parse_source_options(opts, streaming=True).horizon_s is None
    for value, seconds in (("6h", 21600.0), ("30m", 1800.0), ("1.5d", 129600.0), ("none", None)):
        got = parse_source_options({**opts, "acceptanceHorizon": value}, streaming=True)
        assert got.horizon_s == seconds
    with pytest.raises(ConfigError, match="acceptanceHorizon"):  # a stream's option
        parse_source_options({**opts, "acceptanceHorizon": "1h"}, streaming=False)


def test_the_cutoff_is_in_the_offset_and_a_build_without_it_refuses_it() -> None:
    pos = Position({"p-0": 9}, {"p-0": (2, 5)}, cutoff_ns=123)
    raw = QuiverOffset(pos, "s1").to_json()
    assert raw == {
        "v": CUTOFF_VERSION,
        "store": "s1",
        "segments": {"p-0": 9},
        "backlog": {"p-0": [2, 5]},
        "cutoff_ns": 123,
    }
    assert QuiverOffset.from_json(raw).position == pos
    plain = Position({"p-0": 9}, cutoff_ns=0)
    assert QuiverOffset.from_json(QuiverOffset(plain, "s1").to_json()).position == plain
    assert Position.from_json(pos.to_json()) == pos
    with pytest.raises(OffsetFormatError, match="cutoff_ns"):
        QuiverOffset.from_json({"v": CUTOFF_VERSION, "store": "s1", "segments": {"p-0": 1}})
    with pytest.raises(OffsetFormatError, match="newer quiver_spark"):
        QuiverOffset.from_json({**raw, "v": CUTOFF_VERSION + 1})
