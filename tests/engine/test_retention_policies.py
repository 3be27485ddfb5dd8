"""The three retention layers, their precedence, multi-partition caps, throttling (ARCHITECTURE.md §15.1, §15.2)."""

from __future__ import annotations

import random

import pytest

from quiver_spark import metrics as m
from quiver_spark.admission import wait_for_capacity
from quiver_spark.config import RetentionConfig, SizeCapPolicy
from quiver_spark.errors import StoreAtCapacityError
from quiver_spark.retention import AnchoredClock, apply_retention
from quiver_spark.retention_plan import decide_retention
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from tests.engine.subscriber_helpers import HOUR_NS, MemCatalog

BP = SizeCapPolicy.BACKPRESSURE
DROP = SizeCapPolicy.DROP_OLDEST


@pytest.fixture
def env(tmp_path):
    cat = MemCatalog()
    reg = SubscriberRegistry.open(str(tmp_path))
    yield cat, reg
    reg.close()


def _fill(cat: MemCatalog, p: str, n: int, size: int = 100, t0: int = 0) -> list[int]:
    return [cat.add(p, size, t0 + i) for i in range(n)]


def test_steady_state_deletes_exactly_what_every_subscriber_acked(env):
    cat, reg = env
    _fill(cat, "p-0", 5)
    reg.register("a", retained=cat.retained())
    reg.register("b", retained=cat.retained())
    reg.record("a", "p-0", [1, 2, 3], Outcome.ACK)
    reg.record("b", "p-0", [2, 3, 5], Outcome.ACK)
    res = apply_retention(cat, reg, RetentionConfig(), now_ns=10)
    assert res.deleted == {"p-0": [2, 3]}
    assert cat.retained() == {"p-0": [1, 4, 5]}
    assert res.dropped == {}
    assert reg.is_deleted("p-0", 2) and not reg.is_deleted("p-0", 1)


def test_no_subscriber_means_steady_state_keeps_everything(env):
    cat, reg = env
    _fill(cat, "p-0", 3)
    assert apply_retention(cat, reg, RetentionConfig(), now_ns=10).deleted == {}


def test_steady_state_headroom_keeps_the_newest_processed_segments(env):
    cat, reg = env
    _fill(cat, "p-0", 6)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", range(1, 7), Outcome.ACK)
    res = apply_retention(cat, reg, RetentionConfig(steady_state_headroom_bytes=250), now_ns=10)
    assert res.deleted == {"p-0": [1, 2, 3, 4]} and cat.retained() == {"p-0": [5, 6]}


def test_backpressure_never_deletes_unacked_and_throttles(env):
    cat, reg = env
    _fill(cat, "p-0", 10)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [1, 2, 7], Outcome.ACK)
    cfg = RetentionConfig(size_cap_bytes=500, size_cap_policy=BP, steady_state_headroom_bytes=10**9)
    res = apply_retention(cat, reg, cfg, now_ns=10)
    assert res.throttle
    # only processed ones went (oldest first), never an unacked one
    assert set(res.deleted["p-0"]) == {1, 2, 7}
    for s in cat.retained()["p-0"]:
        assert not reg.is_done("a", "p-0", s)
    assert res.dropped == {}


def test_backpressure_with_a_random_workload_never_loses_an_unacked_segment(env):
    cat, reg = env
    rng = random.Random(7)
    reg.register("a")
    reg.register("b")
    for step in range(60):
        _fill(cat, f"p-{step % 3}", 2, size=rng.randint(50, 150), t0=step)
        for sub in ("a", "b"):
            p = f"p-{rng.randrange(3)}"
            avail = cat.retained().get(p, [])
            if avail:
                reg.record(sub, p, rng.sample(avail, min(2, len(avail))), Outcome.ACK)
        before = {(p, s) for p, v in cat.retained().items() for s in v}
        res = apply_retention(cat, reg, RetentionConfig(size_cap_bytes=1500), now_ns=step)
        for p, seqs in res.deleted.items():
            for s in seqs:
                assert (p, s) in before
                assert reg.is_done("a", p, s) and reg.is_done("b", p, s)
        assert res.dropped == {}
        assert res.throttle == (cat.total() > 1500)


def test_drop_oldest_drops_oldest_only_and_records_dropped_before_deleting(env, tmp_path):
    cat, reg = env
    _fill(cat, "p-0", 10)
    reg.register("a", retained=cat.retained())
    reg.register("b", retained=cat.retained())
    reg.record("a", "p-0", [3, 4], Outcome.ACK)  # a has a gap at 1, 2
    metrics = m.Metrics()
    cfg = RetentionConfig(size_cap_bytes=600, size_cap_policy=DROP)
    res = apply_retention(cat, reg, cfg, now_ns=10, metrics=metrics)
    assert not res.throttle
    assert cat.retained() == {"p-0": [5, 6, 7, 8, 9, 10]}
    assert res.deleted == {"p-0": [1, 2, 3, 4]}
    assert res.dropped == {"a": {"p-0": [1, 2]}, "b": {"p-0": [1, 2, 3, 4]}}
    assert reg.hwm("a", "p-0") == 4 and reg.gaps("a", "p-0") == frozenset()
    assert reg.hwm("b", "p-0") == 4
    assert metrics.get(m.SEGMENT_DROPPED) == 4
    assert metrics.get(m.SUBSCRIBER_DROPPED, subscriber="a") == 2
    assert metrics.get(m.SUBSCRIBER_DROPPED, subscriber="b") == 4
    assert metrics.get(m.GC_EVICTIONS, reason="size") == 4
    # the dropped outcomes are durable: a fresh process sees them
    again = SubscriberRegistry.open(reg.root)
    assert again.hwm("b", "p-0") == 4 and again.is_deleted("p-0", 1)
    again.close()


def test_drop_oldest_prefers_processed_segments_before_unprocessed(env):
    cat, reg = env
    _fill(cat, "p-0", 6)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [5, 6], Outcome.ACK)
    cfg = RetentionConfig(
        size_cap_bytes=400, size_cap_policy=DROP, steady_state_headroom_bytes=10**9
    )
    res = apply_retention(cat, reg, cfg, now_ns=10)
    assert res.plan.delete_size == [("p-0", 5), ("p-0", 6)]
    assert res.deleted == {"p-0": [5, 6]} and res.dropped == {}


def test_time_retention_drops_unacked_and_records_dropped_under_backpressure(env):
    cat, reg = env
    for t in (0, 1, 5, 9):
        cat.add("p-0", 100, t * HOUR_NS)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [2], Outcome.ACK)
    cfg = RetentionConfig(max_age_hours=4)
    res = apply_retention(cat, reg, cfg, now_ns=10 * HOUR_NS)
    assert res.deleted == {"p-0": [1, 2, 3]}
    assert res.dropped == {"a": {"p-0": [1, 3]}}
    assert res.plan.delete_time == [("p-0", 1), ("p-0", 3)]
    assert res.plan.delete_steady == [("p-0", 2)]
    assert reg.hwm("a", "p-0") == 3


def test_time_retention_uses_only_the_callers_clock(env):
    cat, reg = env
    cat.add("p-0", 100, 0)
    reg.register("a", retained=cat.retained())
    cfg = RetentionConfig(max_age_hours=1)
    assert apply_retention(cat, reg, cfg, now_ns=HOUR_NS).deleted == {}
    assert apply_retention(cat, reg, cfg, now_ns=HOUR_NS + 1).deleted == {"p-0": [1]}


def test_anchored_clock_ignores_a_wall_clock_jump_after_start():
    wall = [1_000]
    mono = [50]
    clock = AnchoredClock(wall_ns=lambda: wall[0], mono_ns=lambda: mono[0])
    wall[0] += 10 * HOUR_NS  # NTP step forward
    mono[0] += 7
    assert clock.now_ns() == 1_007


def test_condemned_but_undeleted_segments_are_finished_by_the_next_pass(env):
    cat, reg = env
    _fill(cat, "p-0", 3)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [1], Outcome.ACK)
    reg.condemn({"p-0": [1, 2]})  # as if a pass crashed right after its records
    assert reg.is_done("a", "p-0", 2)
    res = apply_retention(cat, reg, RetentionConfig(), now_ns=1)
    assert res.deleted == {"p-0": [1, 2]} and cat.retained() == {"p-0": [3]}


def test_a_subscriber_registered_after_a_deletion_does_not_wait_for_it(env):
    cat, reg = env
    _fill(cat, "p-0", 4)
    reg.register("a", retained=cat.retained())
    reg.record("a", "p-0", [2, 3], Outcome.ACK)
    stale = cat.retained()  # listing taken before retention runs
    apply_retention(cat, reg, RetentionConfig(), now_ns=1)
    reg.register("late", retained=stale)
    assert reg.pending("late", "p-0", [1, 2, 3, 4]) == [1, 4]
    reg.record("late", "p-0", [1], Outcome.ACK)
    assert reg.hwm("late", "p-0") == 3


def _simulate_overshoot(per_partition: bool, n: int, target: int, cap: int, seed: int) -> int:
    """N writers each finalize `target`-byte segments, checking the cap before each.

    A writer's check sees the store as of the last retention pass (it runs between
    rounds), so several writers admit a segment concurrently. Returns the maximum
    bytes observed above the cap.
    """
    rng = random.Random(seed)
    sizes = {f"p-{i}": 0 for i in range(n)}
    worst = 0
    for _ in range(400):
        snapshot = dict(sizes)
        for p in rng.sample(sorted(sizes), k=n):
            allowed = (snapshot[p] < cap // n) if per_partition else (sum(snapshot.values()) < cap)
            if allowed:
                sizes[p] += rng.randint(1, target)
        worst = max(worst, sum(sizes.values()) - cap)
        for p in sizes:  # subscribers drain a random amount
            sizes[p] = max(0, sizes[p] - rng.randint(0, target))
    return worst


@pytest.mark.parametrize("per_partition", [True, False])
def test_overshoot_above_the_cap_stays_within_the_documented_bound(per_partition):
    n, target, cap = 8, 1000, 20_000
    worst = max(_simulate_overshoot(per_partition, n, target, cap, seed) for seed in range(5))
    bound = n * target  # ARCHITECTURE.md §15.2: at most one segment per concurrent writer
    assert 0 < worst <= bound


def test_per_partition_cap_throttles_a_hot_partition_while_shared_cap_uses_idle_space(env):
    cat, reg = env
    _fill(cat, "hot", 8)  # 800 bytes
    _fill(cat, "idle", 1)  # 100 bytes
    reg.register("a", retained=cat.retained())
    listing = {p: cat.list(p) for p in cat.partitions()}
    cfg = RetentionConfig(size_cap_bytes=1000)
    phase1 = decide_retention(listing, reg, cfg, 0, per_partition_cap=True)
    shared = decide_retention(listing, reg, cfg, 0)
    assert phase1.throttled_partitions == ["hot"] and phase1.throttle
    assert not shared.throttle


def test_shared_drop_oldest_evicts_the_globally_oldest_in_seq_order(env):
    cat, reg = env
    for i in range(4):
        cat.add("p-0", 100, 10 * i)
        cat.add("p-1", 100, 10 * i + 5)
    reg.register("a", retained=cat.retained())
    cfg = RetentionConfig(size_cap_bytes=500, size_cap_policy=DROP)
    pl = decide_retention({p: cat.list(p) for p in cat.partitions()}, reg, cfg, 0)
    assert pl.drop_size == [("p-0", 1), ("p-1", 1), ("p-0", 2)]


def test_wal_bytes_count_toward_the_cap(env):
    cat, reg = env
    _fill(cat, "p-0", 2)
    reg.register("a", retained=cat.retained())
    cfg = RetentionConfig(size_cap_bytes=1000)
    listing = {"p-0": cat.list("p-0")}
    assert not decide_retention(listing, reg, cfg, 0, {"p-0": 700}).throttle
    assert decide_retention(listing, reg, cfg, 0, {"p-0": 900}).throttle


def test_wait_for_capacity_returns_when_space_frees_and_counts_one_throttle():
    metrics = m.Metrics()
    t = [0.0]
    calls = iter([False, False, True])
    waited = wait_for_capacity(
        lambda: next(calls),
        5,
        metrics,
        sleep=lambda s: t.__setitem__(0, t[0] + s),
        clock=lambda: t[0],
    )
    assert waited == pytest.approx(0.1)
    assert metrics.get(m.INGEST_THROTTLE) == 1


def test_wait_for_capacity_times_out_with_a_retryable_error():
    t = [0.0]
    with pytest.raises(StoreAtCapacityError) as err:
        wait_for_capacity(
            lambda: False, 1.0, sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0]
        )
    assert err.value.retryable and "size_cap" in str(err.value)
    assert t[0] == pytest.approx(1.0)
