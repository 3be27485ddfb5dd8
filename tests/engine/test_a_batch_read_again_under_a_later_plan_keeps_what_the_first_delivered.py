"""An embedded consumer with an acceptance horizon (ARCHITECTURE.md §19.1) that reads the
same range again under another plan before acknowledging records ``dropped`` what the
acknowledged batch left out, never what it delivered: a later read under a later cutoff
(which leaves the segments out) or under an end without a cutoff (which delivers them)
does not change what the batch of the acknowledged end did."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from quiver_spark.subscription import Subscription
from quiver_spark.subscription.dropping import LEFT_OUT_KEPT
from tests.engine.spark_like_driver import read_keys
from tests.engine.test_an_acceptance_horizon_drops_old_segments_exactly_once import HOUR_NS, Store
from tests.engine.test_an_acknowledgement_through_several_batches_drops_only_what_they_left_out import (
    _keys,
    _spy,
)


def test_a_later_plan_over_the_same_range_never_drops_what_the_acked_batch_delivered(
    tmp_path: Path,
) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0)
        got1 = set(read_keys(sub, s0, e1))
        assert got1 == set(st.new)
        sub.clock = lambda: st.clock(3 * HOUR_NS)  # everything is past the later cutoff
        e2 = sub.next_batch_end(s0)
        assert set(read_keys(sub, s0, e2)) == set()
        calls = _spy(sub)
        sub.ack(e1)
        ((acks, drops),) = calls
        assert _keys(st, acks) == got1
        assert _keys(st, drops) == set(st.old)


def test_the_acked_batch_decides_a_seq_another_plan_read_too(tmp_path: Path) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0)
        read_keys(sub, s0, e1)
        sub.clock = lambda: st.clock(3 * HOUR_NS)
        e2 = sub.next_batch_end(s0)
        read_keys(sub, s0, e2)
        calls = _spy(sub)
        sub.ack(e2)  # the later batch, which left everything out
        ((acks, drops),) = calls
        assert _keys(st, acks) == set()
        assert _keys(st, drops) == set(st.old + st.new)


def test_a_read_through_an_end_without_a_cutoff_is_acknowledged_as_delivered(
    tmp_path: Path,
) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0)
        read_keys(sub, s0, e1)  # leaves the old ones out
        whole = dataclasses.replace(e1, cutoff_ns=None)
        got = set(read_keys(sub, s0, whole))
        assert got == set(st.old + st.new)
        calls = _spy(sub)
        sub.ack(whole)
        ((acks, drops),) = calls
        assert _keys(st, acks) == got
        assert drops == {}


def test_planning_the_same_range_again_and_again_keeps_a_bounded_record_per_segment(
    tmp_path: Path,
) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        s0 = sub.start("earliest")
        ends = []
        for i in range(50):  # a consumer that plans again and again, acknowledging none
            sub.clock = lambda i=i: st.clock(i * HOUR_NS)
            ends.append(sub.next_batch_end(s0))
            read_keys(sub, s0, ends[-1])
        seqs = len(st.keys)
        assert len(sub._acks.handed) == seqs
        assert all(len(left_out) <= LEFT_OUT_KEPT for _, left_out in sub._acks.handed.values())
        calls = _spy(sub)
        sub.ack(ends[0])  # the first plan, the only one that delivered the new ones
        ((acks, drops),) = calls
        assert _keys(st, acks) == set(st.new)
        assert _keys(st, drops) == set(st.old)
        assert sub._acks.handed == {}


def test_reading_acknowledged_history_again_leaves_no_record_behind_after_the_next_ack(
    tmp_path: Path,
) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "other", horizon="1h") as other:
        other.start("earliest")  # keeps the segments after "s" acknowledges them
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0)
        read_keys(sub, s0, e1)
        sub.ack(e1)
        for _ in range(3):  # a replay of history already acknowledged
            assert set(read_keys(sub, s0, e1)) == set(st.new)
        assert sub._acks.handed
        sub.ack(e1)
        assert sub._acks.handed == {}
