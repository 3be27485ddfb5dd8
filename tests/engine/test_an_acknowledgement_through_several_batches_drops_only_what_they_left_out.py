"""An embedded consumer that acknowledges several batches with one ``ack`` (ARCHITECTURE.md
§19.1) records ``dropped`` exactly the segments its batches left out as past their own
cutoffs: a segment a batch delivered is acknowledged, even when a later batch's cutoff
has since passed it, and a segment a batch left out is dropped, even when the later
cutoff would not have. An acknowledgement in a process that never read the batch (a
restarted Spark driver's commit) judges by the end's own cutoff, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quiver_spark.subscribers import records
from quiver_spark.subscription import Caps, Subscription
from tests.engine.spark_like_driver import read_keys
from tests.engine.test_an_acceptance_horizon_drops_old_segments_exactly_once import HOUR_NS, Store


def _spy(sub: Subscription) -> list[tuple[dict[str, list[int]], dict[str, set[int]]]]:
    """Every ``record_many`` the subscription makes: (acks, drops) per partition."""
    calls: list[tuple[dict[str, list[int]], dict[str, set[int]]]] = []
    real = sub.registry.record_many

    def record_many(name: str, acks: Any, outcome: Any, **kw: Any) -> Any:
        calls.append(({p: list(v) for p, v in acks.items()}, dict(kw.get("dropped") or {})))
        return real(name, acks, outcome, **kw)

    sub.registry.record_many = record_many  # type: ignore[method-assign]
    return calls


def _keys(st: Store, seqs: dict[str, Any]) -> set[int]:
    return {k for p, v in seqs.items() for s in v for k in st.keys[(p, s)]}


def test_one_ack_through_two_batches_drops_only_what_each_batch_left_out(tmp_path: Path) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0, Caps(max_segments=8))  # the old ones, and two new
        got1 = read_keys(sub, s0, e1)
        sub.clock = lambda: st.clock(3 * HOUR_NS)  # the new ones are now past the horizon
        e2 = sub.next_batch_end(e1)
        got2 = read_keys(sub, e1, e2)
        calls = _spy(sub)
        sub.ack(e2)
        delivered = set(got1) | set(got2)
        ((acks, drops),) = calls
        assert _keys(st, acks) == delivered
        assert _keys(st, drops) == set(st.old + st.new) - delivered
        assert delivered & set(st.new) and _keys(st, drops) & set(st.old)
        rec = records.read_record(sub.store.objects, "s")
        assert rec is not None and rec.horizon_dropped_rows == len(_keys(st, drops))


def test_an_ack_by_a_process_that_never_read_the_batch_judges_by_its_end(tmp_path: Path) -> None:
    st = Store(tmp_path)
    with Subscription.open(st.root, "s", horizon="1h") as sub:
        sub.clock = st.clock
        s0 = sub.start("earliest")
        e1 = sub.next_batch_end(s0)
        delivered = set(read_keys(sub, s0, e1))
    with Subscription.open(st.root, "s", horizon="1h") as sub:  # a restarted driver
        sub.clock = lambda: st.clock(3 * HOUR_NS)
        calls = _spy(sub)
        sub.ack(e1)
        ((acks, drops),) = calls
        assert _keys(st, acks) == delivered == set(st.new)
        assert _keys(st, drops) == set(st.old)
