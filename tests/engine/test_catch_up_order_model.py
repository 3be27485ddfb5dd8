"""A hypothesis stateful model of one subscriber whose catch-up order is drawn at every
step (``oldest`` or ``newest``, with a drawn head share and caps), a consumer process
that restarts at every step and may die before its acknowledgement, writers adding
segments to two partitions, retention passes, and segments dropped unread as
``drop_oldest`` drops them: no row is ever delivered twice, every row is delivered
or dropped, and retention never deletes a segment the subscriber has not finished
unless it recorded it dropped (ARCHITECTURE.md §19). Each machine runs on each kind of
root: a POSIX directory and a ``memory://`` object root (``...OnPosix``,
``...OnMemory``)."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from quiver_spark import QuiverStore
from quiver_spark.subscription import Caps, Subscription
from tests.scratch import SCRATCH
from tests.stores import HAND_SEALED, MEMORY_ROOT, POSIX_ROOT, OnRoot

PARTS = ("p-0", "p-1")
ORDERS = ("oldest", "newest")


class CatchUpModel(OnRoot, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="qcatchup-", dir=SCRATCH)
        self.root = self.kind.new(self.tmp)
        config = self.kind.config(HAND_SEALED, self.tmp)
        self.writers = {
            p: QuiverStore.open(self.root, config, partition=p, background=False) for p in PARTS
        }
        self.keys_of: dict[tuple[str, int], list[int]] = {}
        self.next_key = 0
        self.delivered: Counter[int] = Counter()
        self.dropped: set[tuple[str, int]] = set()
        with Subscription.open(self.root, "m") as sub:
            sub.start()

    def teardown(self) -> None:
        for s in self.writers.values():
            s.close()
        self.kind.forget(self.root)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _consume(self, order: str, share: float, cap: int, *, ack: bool) -> bool:
        """One consumer process: one batch, read, acknowledged unless it dies first.
        False when there was nothing to read."""
        given = share if order == "newest" else None  # a share oldest first is refused
        with Subscription.open(self.root, "m", order=order, head_share=given) as sub:
            batch = sub.poll(Caps(max_segments=cap))
            if batch is None:
                return False
            keys = [
                k for meta in batch.segments for b in sub.read(meta) for k in b["k"].to_pylist()
            ]
            if ack:
                sub.ack(batch.end)
                self.delivered.update(keys)
            return True

    @rule(p=st.sampled_from(PARTS), n=st.integers(1, 3))
    def write(self, p: str, n: int) -> None:
        for _ in range(n):
            keys = list(range(self.next_key, self.next_key + 2))
            self.next_key += 2
            self.writers[p].append(pa.record_batch({"k": pa.array(keys, type=pa.int64())}))
            meta = self.writers[p].finalize()
            assert meta is not None
            self.keys_of[(p, meta.seq)] = keys

    @rule(
        order=st.sampled_from(ORDERS),
        share=st.sampled_from([0.25, 0.75, 1.0]),
        cap=st.integers(1, 4),
        ack=st.booleans(),
    )
    def consume(self, order: str, share: float, cap: int, ack: bool) -> None:
        self._consume(order, share, cap, ack=ack)

    @rule(
        p=st.sampled_from(PARTS),
        share=st.sampled_from([0.01, 0.5, 0.75]),
        ack=st.booleans(),
    )
    def write_then_consume_one(self, p: str, share: float, ack: bool) -> None:
        """A steady writer: a new segment before a batch that admits one segment, newest
        first (the backfill takes its turns instead of the head taking every batch)."""
        self.write(p, 1)
        self._consume("newest", share, 1, ack=ack)

    @rule()
    def retention(self) -> None:
        self.writers["p-0"].run_retention()

    @rule(p=st.sampled_from(PARTS))
    def drop_oldest(self, p: str) -> None:
        """What ``drop_oldest`` does to the oldest retained segment: ``dropped`` and
        DELETED recorded, then the files go."""
        store = self.writers[p]
        seqs = store.segment_location.published_seqs(p)
        if not seqs:
            return
        with store.subscribers.exclusive() as reg:
            reg.condemn({p: [seqs[0]]})
        store.segment_location.delete(p, [seqs[0]])
        self.dropped.add((p, seqs[0]))

    @invariant()
    def no_row_twice_and_nothing_unfinished_deleted(self) -> None:
        twice = sorted(k for k, n in self.delivered.items() if n > 1)
        assert not twice, f"rows delivered twice: {twice}"
        store = self.writers["p-0"]
        store.subscribers.refresh()
        for (p, seq), keys in self.keys_of.items():
            if (p, seq) in self.dropped or store.segment_location.is_published(p, seq):
                continue
            assert store.subscribers.is_done("m", p, seq), (p, seq)  # deleted: done first
            if not set(keys) <= set(self.delivered):
                pytest.fail(f"{p}/{seq} deleted before its rows were delivered: {keys}")

    def check_drained(self, order: str) -> None:
        for _ in range(1000):
            if not self._consume(order, 0.75, 3, ack=True):
                break
        missing = sorted(
            k
            for key, keys in self.keys_of.items()
            if key not in self.dropped
            for k in keys
            if k not in self.delivered
        )
        assert not missing, f"rows never delivered: {missing}"
        assert max(self.delivered.values(), default=1) == 1


class DrainedNewest(CatchUpModel):
    def teardown(self) -> None:
        try:
            self.check_drained("newest")
        finally:
            super().teardown()


class DrainedOldest(CatchUpModel):
    def teardown(self) -> None:
        try:
            self.check_drained("oldest")
        finally:
            super().teardown()


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


class DrainedNewestOnPosix(DrainedNewest, root=POSIX_ROOT):
    pass


class DrainedNewestOnMemory(DrainedNewest, root=MEMORY_ROOT):
    pass


class DrainedOldestOnPosix(DrainedOldest, root=POSIX_ROOT):
    pass


class DrainedOldestOnMemory(DrainedOldest, root=MEMORY_ROOT):
    pass


TestDrainedNewestOnPosix = DrainedNewestOnPosix.TestCase
TestDrainedNewestOnPosix.settings = _settings(15, 25)
TestDrainedNewestOnMemory = DrainedNewestOnMemory.TestCase
TestDrainedNewestOnMemory.settings = _settings(15, 25)
TestDrainedOldestOnPosix = DrainedOldestOnPosix.TestCase
TestDrainedOldestOnPosix.settings = _settings(10, 25)
TestDrainedOldestOnMemory = DrainedOldestOnMemory.TestCase
TestDrainedOldestOnMemory.settings = _settings(10, 25)


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "machine",
    [DrainedNewestOnPosix, DrainedNewestOnMemory, DrainedOldestOnPosix, DrainedOldestOnMemory],
)
def test_catch_up_order_model_soak(machine: type[CatchUpModel]) -> None:
    """The long profile (``make soak``): more and longer sequences on each root."""
    run = machine.TestCase("runTest")
    run.settings = _settings(300, 50)
    run.runTest()
