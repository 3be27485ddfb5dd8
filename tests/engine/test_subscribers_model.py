"""A hypothesis stateful model of subscribers, outcomes, checkpoints, crashes, retention,
on each kind of root (a POSIX directory, whose ack log is files under ``subscribers/``;
a ``memory://`` object root, whose ack log is objects in the bucket)."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quiver_spark.config import RetentionConfig, SizeCapPolicy
from quiver_spark.errors import UnknownSegmentError
from quiver_spark.retention import apply_retention
from quiver_spark.subscribers import Outcome, StartPosition
from tests.engine.subscriber_helpers import MemCatalog
from tests.scratch import SCRATCH
from tests.stores import MEMORY_ROOT, POSIX_ROOT, OnRoot, open_registry_at

PARTS = ["p-0", "p-1"]
NAMES = ["s1", "s2", "s3"]
OUTCOMES = [Outcome.ACK, Outcome.NACK, Outcome.DROPPED]


class SubscriberModel(OnRoot, RuleBasedStateMachine):
    """The model: per subscriber and partition a done-set; deletions count as done.
    Runs as a root's machine (``SubscriberModelOnPosix``, ``SubscriberModelOnMemory``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="qmodel-", dir=SCRATCH)
        self.root = self.kind.new(self.tmp)
        self.reg = open_registry_at(self.root, checkpoint_records=7)
        self.cat = MemCatalog()
        self.done: dict[str, dict[str, set[int]]] = {}
        self.nacked: dict[str, dict[str, set[int]]] = {}
        self.deleted: dict[str, set[int]] = {p: set() for p in PARTS}
        self.reopens = 0

    def teardown(self) -> None:
        self.reg.close()
        self.kind.forget(self.root)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- model helpers -------------------------------------------------------------
    def _done(self, sub: str, p: str, seq: int) -> bool:
        return seq in self.done[sub].get(p, set()) or seq in self.deleted[p]

    def _expect(self, sub: str, p: str) -> tuple[int, frozenset[int]]:
        done = self.done[sub].get(p, set()) | self.deleted[p]
        h = 0
        while h + 1 in done:
            h += 1
        return h, frozenset(s for s in done if s > h)

    # -- rules ------------------------------------------------------------------------
    @rule(p=st.sampled_from(PARTS), n=st.integers(1, 3))
    def finalize(self, p: str, n: int) -> None:
        for _ in range(n):
            self.cat.add(p, 100, len(self.cat.deleted) + sum(self.cat.next_seq.values()))

    @rule(name=st.sampled_from(NAMES), latest=st.booleans())
    def register(self, name: str, latest: bool) -> None:
        if name in self.done:
            return
        retained = self.cat.retained()
        start = StartPosition.LATEST if latest else StartPosition.EARLIEST
        self.reg.register(name, start=start, retained=retained)
        self.done[name] = {}
        self.nacked[name] = {}
        for p, seqs in retained.items():
            if seqs:
                mark = max(seqs) if latest else min(seqs) - 1
                self.done[name][p] = set(range(1, mark + 1))

    @precondition(lambda self: self.done)
    @rule(data=st.data(), outcome=st.sampled_from(OUTCOMES), p=st.sampled_from(PARTS))
    def record(self, data: st.DataObject, outcome: Outcome, p: str) -> None:
        sub = data.draw(st.sampled_from(sorted(self.done)))
        top = self.cat.next_seq.get(p, 1) - 1
        if top < 1:
            return
        seqs = data.draw(st.lists(st.integers(1, top), min_size=1, max_size=4))
        self.reg.record(sub, p, seqs, outcome, known=self.cat.known)
        for s in seqs:
            if outcome is Outcome.NACK:
                if not self._done(sub, p, s):
                    self.nacked[sub].setdefault(p, set()).add(s)
            else:
                self.done[sub].setdefault(p, set()).add(s)

    @precondition(lambda self: self.done)
    @rule(p=st.sampled_from(PARTS), extra=st.integers(1, 5))
    def record_unknown_is_rejected(self, p: str, extra: int) -> None:
        sub = sorted(self.done)[0]
        seq = self.cat.next_seq.get(p, 1) - 1 + extra
        with pytest.raises(UnknownSegmentError):
            self.reg.record(sub, p, [seq], Outcome.ACK, known=self.cat.known)

    @precondition(lambda self: self.done)
    @rule(data=st.data())
    def deregister(self, data: st.DataObject) -> None:
        sub = data.draw(st.sampled_from(sorted(self.done)))
        self.reg.deregister(sub)
        del self.done[sub]
        del self.nacked[sub]

    @rule()
    def checkpoint(self) -> None:
        self.reg.checkpoint()

    @rule()
    def crash_and_reopen(self) -> None:
        # drop the object without close(): only what reached the root survives
        self.reg = open_registry_at(self.root, checkpoint_records=7)
        self.reopens += 1
        self.check_state()

    @rule(drop=st.booleans(), cap=st.integers(100, 800))
    def retention(self, drop: bool, cap: int) -> None:
        policy = SizeCapPolicy.DROP_OLDEST if drop else SizeCapPolicy.BACKPRESSURE
        before = {p: list(v) for p, v in self.cat.retained().items()}
        done_all = {
            (p, s)
            for p, v in before.items()
            for s in v
            if self.done and all(self._done(sub, p, s) for sub in self.done)
        }
        res = apply_retention(
            self.cat,
            self.reg,
            RetentionConfig(size_cap_bytes=cap, size_cap_policy=policy),
            now_ns=0,
        )
        for p, seqs in res.deleted.items():
            for s in seqs:
                if not drop:
                    assert (p, s) in done_all  # backpressure never deletes unacked
                elif (p, s) in res.plan.drop_size:  # drop_oldest: only the oldest unprocessed
                    assert all(x in seqs or (p, x) in done_all for x in before[p] if x < s)
                for sub in self.done:
                    if not self._done(sub, p, s):
                        assert s in res.dropped[sub][p]
                self.deleted[p].add(s)
        if not drop:
            assert res.dropped == {}
        assert res.throttle == (self.cat.total() > cap)

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def check_state(self) -> None:
        assert self.reg.subscribers() == sorted(self.done)
        for sub in self.done:
            for p in PARTS:
                assert (self.reg.hwm(sub, p), self.reg.gaps(sub, p)) == self._expect(sub, p)
                want = {s for s in self.nacked[sub].get(p, set()) if not self._done(sub, p, s)}
                assert self.reg.nacked(sub, p) == want
                avail = self.cat.retained().get(p, [])
                assert self.reg.pending(sub, p, avail) == [
                    s for s in avail if not self._done(sub, p, s)
                ]


class SubscriberModelOnPosix(SubscriberModel, root=POSIX_ROOT):
    """The model on a POSIX root."""


class SubscriberModelOnMemory(SubscriberModel, root=MEMORY_ROOT):
    """The model on a ``memory://`` object root."""


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


TestSubscriberModelOnPosix = SubscriberModelOnPosix.TestCase
TestSubscriberModelOnPosix.settings = _settings(30, 30)
TestSubscriberModelOnMemory = SubscriberModelOnMemory.TestCase
TestSubscriberModelOnMemory.settings = _settings(30, 30)


@pytest.mark.soak
@pytest.mark.parametrize("machine", [SubscriberModelOnPosix, SubscriberModelOnMemory])
def test_subscriber_model_soak(machine: type[SubscriberModel]) -> None:
    run = machine.TestCase("runTest")
    run.settings = _settings(1000, 80)
    run.runTest()
