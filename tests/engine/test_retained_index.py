"""The incremental retention planner and its index (ARCHITECTURE.md §15.2).

- :func:`decide_retention` decides exactly what the walk-everything reference planner decides,
  for generated listings, subscriber states and policies;
- ``done_summary`` says done for exactly the seqs ``done_by_all or is_deleted`` does;
- a long-lived index follows a store changed by other processes (publishes, their
  retention passes) and never drops data on a stale view (a quarantined segment);
- a pass's filesystem requests do not grow with the retained segments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver_spark import QuiverStore, RetentionConfig, SizeCapPolicy
from quiver_spark import metrics as qm
from quiver_spark.fs import DEFAULT_IO, FileIO
from quiver_spark.gauges import observe
from quiver_spark.objects.local import LocalObjects
from quiver_spark.policy import replace_policy
from quiver_spark.retained import RetainedIndex
from quiver_spark.retention_plan import decide_retention
from quiver_spark.subscribers import Outcome
from quiver_spark.subscribers.journal import FileJournal
from quiver_spark.subscribers.registry import SubscriberRegistry
from quiver_spark.subscribers.state import PartState
from tests.stores import HAND_SEALED, publish

from .retention_reference import reference_plan
from .subscriber_helpers import HOUR_NS, Seg

HOUR = HOUR_NS


@dataclasses.dataclass(frozen=True)
class Damaged:
    partition: str
    seq: int
    path: str
    error: str
    size_bytes: int


def in_memory_registry(
    parts: list[str], subs: dict[str, dict[str, tuple[int, set[int]]]],
    deleted: dict[str, tuple[int, set[int]]],
) -> SubscriberRegistry:  # fmt: skip
    """A registry whose state is set directly (no files): every query is the real one."""
    reg = SubscriberRegistry(FileJournal("unused", DEFAULT_IO, 1, False))
    state = reg.state
    for i, p in enumerate(parts, 1):
        state.parts[i], state.part_ids[p] = p, i
    for sid, (name, per) in enumerate(sorted(subs.items()), 1):
        state.subs[sid], state.by_name[name] = name, sid
        for p, (hwm, gaps) in per.items():
            ps = PartState()
            ps.add_runs([(1, hwm)] if hwm else [])
            ps.add_seqs(sorted(gaps))
            state.progress.setdefault(sid, {})[state.part_ids[p]] = ps
    for p, (hwm, gaps) in deleted.items():
        ps = PartState()
        ps.add_runs([(1, hwm)] if hwm else [])
        ps.add_seqs(sorted(gaps))
        state.deleted[state.part_ids[p]] = ps
    return reg


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    parts = [f"p{i}" for i in range(draw(st.integers(1, 3)))]
    listing: dict[str, list[Seg]] = {}
    damaged = []
    top: dict[str, int] = {}
    for p in parts:
        n = draw(st.integers(0, 9))
        first = draw(st.integers(1, 4))
        t = draw(st.integers(0, 5)) * HOUR
        segs = []
        for seq in range(first, first + n):
            t += draw(st.sampled_from([0, HOUR // 2, HOUR, 3 * HOUR, -HOUR]))  # some out of order
            span = draw(st.sampled_from([0, HOUR // 4]))
            if draw(st.integers(0, 12)) == 0:
                damaged.append(Damaged(p, seq, f"{p}/{seq}.meta", "bad crc", 70))
                continue
            size, rows = draw(st.sampled_from([50, 100, 300])), draw(st.integers(0, 1000))
            segs.append(Seg(p, seq, size, t, t + span, rows))
        listing[p] = segs
        top[p] = first + n
    sub_names = draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3))
    subs: dict[str, dict[str, tuple[int, set[int]]]] = {}
    for name in sub_names:
        per = {}
        for p in parts:
            if draw(st.booleans()):
                hwm = draw(st.integers(0, top[p]))
                gaps = set(draw(st.lists(st.integers(hwm + 2, top[p] + 2), max_size=3)))
                per[p] = (hwm, gaps)
        subs[name] = per
    deleted = {}
    for p in parts:
        if draw(st.integers(0, 3)) == 0:
            hwm = draw(st.integers(0, 3))
            deleted[p] = (
                hwm,
                set(draw(st.lists(st.integers(hwm + 2, hwm + top[p] + 2), max_size=2))),
            )
    config = RetentionConfig(
        steady_state_headroom_bytes=draw(st.sampled_from([0, 0, 150, 400])),
        max_age_hours=draw(st.sampled_from([None, None, 2.0, 6.0])),
        size_cap_bytes=draw(st.sampled_from([None, None, 200, 600, 1500])),
        size_cap_policy=draw(st.sampled_from(list(SizeCapPolicy))),
    )
    wal = {p: draw(st.sampled_from([0, 0, 100])) for p in parts if draw(st.booleans())}
    return {
        "listing": listing, "damaged": damaged, "subs": subs, "deleted": deleted,
        "config": config, "wal": wal, "parts": parts,
        "now": draw(st.integers(0, 40)) * HOUR // 2,
        "per_partition": draw(st.booleans()),
    }  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_the_planner_decides_what_the_reference_planner_decides(w: dict[str, Any]) -> None:
    reg = in_memory_registry(w["parts"], w["subs"], w["deleted"])
    args = (w["config"], w["now"], w["wal"])
    kw = {"per_partition_cap": w["per_partition"], "damaged": w["damaged"]}
    want = reference_plan(w["listing"], reg, *args, **kw)
    got = decide_retention(w["listing"], reg, *args, **kw)
    assert got == want
    index = RetainedIndex.from_listing(w["listing"], w["damaged"])
    assert decide_retention(index, reg, *args, per_partition_cap=w["per_partition"]) == want


@settings(max_examples=300, deadline=None)
@given(worlds(), st.integers(1, 14))
def test_done_summary_is_done_by_all_or_deleted(w: dict[str, Any], upto: int) -> None:
    reg = in_memory_registry(w["parts"], w["subs"], w["deleted"])
    for p in [*w["parts"], "never-seen"]:
        floor, above = reg.done_summary(p)
        for seq in range(1, upto + 12):
            want = reg.done_by_all(p, seq) or reg.is_deleted(p, seq)
            assert (seq <= floor or seq in above) == want, (p, seq, floor, above)


# -- a long-lived index on a real store ------------------------------------------------------
CFG = HAND_SEALED


def _fresh_listing(root: str) -> dict[str, list[int]]:
    with QuiverStore.open(root, CFG, partition=None, create=False, background=False) as h:
        index = RetainedIndex()
        index.sync(h.segment_location, None, full=True)
        return {p: [s.seq for s in v] for p, v in index.listing().items()}


def _seen(store: QuiverStore) -> dict[str, list[int]]:
    return {p: [s.seq for s in v] for p, v in store._retention.index.listing().items()}


def test_an_index_follows_publishes_and_other_processes_deletions(tmp_path: Path) -> None:
    root = str(tmp_path)
    rnd = random.Random(7)
    with (
        QuiverStore.open(root, CFG, partition="p-0", background=False) as w0,
        QuiverStore.open(root, CFG, partition="p-1", background=False) as w1,
        QuiverStore.open(root, CFG, partition=None, background=False) as a,
        QuiverStore.open(root, CFG, partition=None, background=False) as b,
    ):
        a.subscribers.register("s1")
        a.subscribers.register("s2")
        publish(w0, 2)
        a.run_retention()  # the first pass surveys
        assert a._retention.index.surveyed
        acked: dict[tuple[str, str], set[int]] = {}
        for step in range(60):
            publish(rnd.choice([w0, w1]), rnd.randint(0, 2))
            for sub in ("s1", "s2"):  # acknowledge some of each partition, out of order too
                for p in ("p-0", "p-1"):
                    done = acked.setdefault((sub, p), set())
                    have = [q for q in a.segment_location.published_seqs(p) if q not in done]
                    pick = rnd.sample(have, k=min(len(have), rnd.randint(0, 2)))
                    if pick:
                        a.subscribers.record(sub, p, sorted(pick), Outcome.ACK)
                        done.update(pick)
            b.run_retention()  # another process deletes what is done
            with a.subscribers.exclusive() as reg:  # what a pass of `a` starts from
                a._retention.index.sync(a.segment_location, reg)
            assert _seen(a) == _fresh_listing(root), f"step {step}: before a's own pass"
            a.run_retention()
            assert not a._retention.index.surveyed, f"step {step}: an incremental pass resurveyed"
            assert _seen(a) == _fresh_listing(root), f"step {step}"
        total_deleted = sum(len(v) for v in b.run_retention().deleted.values())
        assert total_deleted == 0 and _seen(a) == _fresh_listing(root)


@contextlib.contextmanager
def _three_segments_pinned(root: str) -> Iterator[QuiverStore]:
    """A read-only store after its first retention pass over segments 1-3 of p-0,
    all pinned by subscriber ``slow``."""
    with QuiverStore.open(root, CFG, partition="p-0", background=False) as w:
        with QuiverStore.open(root, CFG, partition=None, background=False) as a:
            a.subscribers.register("slow")
            publish(w, 3)
            a.run_retention()
            yield a


def test_a_stale_index_never_drops_data_on_what_it_last_saw(tmp_path: Path) -> None:
    """A segment removed by hand (no tool, no record, no quarantine mark) behind the
    index's back is not chosen to drop: a pass that would drop unfinished data surveys
    first."""
    root = str(tmp_path)
    with _three_segments_pinned(root) as a:
        assert [s.seq for s in a._retention.index.segments("p-0")] == [1, 2, 3]
        for suffix in ("meta", "arrow"):
            (tmp_path / "segments" / "p-0" / f"{2:020d}.{suffix}").unlink()
        a._retention.index.sync(a.segment_location, a.subscribers)  # incremental: still sees 2
        assert not a._retention.index.surveyed and a._retention.index.get("p-0", 2) is not None
        replace_policy(LocalObjects(root), {"retention.size_cap": 1,
                                          "retention.size_cap_policy": SizeCapPolicy.DROP_OLDEST})  # fmt: skip
        result = a.run_retention()
        assert a._retention.index.surveyed, "a pass dropping unfinished data surveys first"
        assert result.deleted == {"p-0": [1, 3]}
        assert result.dropped == {"slow": {"p-0": [1, 3]}}
        assert not a.subscribers.is_deleted("p-0", 2)


def test_a_quarantine_makes_the_next_pass_survey(tmp_path: Path) -> None:
    """``quiver fsck --quarantine`` replaces the location's quarantine mark (§5.4):
    every long-lived index surveys at its next pass, without waiting for the period."""
    root = str(tmp_path)
    with _three_segments_pinned(root) as a:
        a.run_retention()
        assert not a._retention.index.surveyed
        other = QuiverStore.open(root, CFG, partition=None, background=False)
        try:
            other.segment_location.quarantine("p-0", 2, "test: damaged")
        finally:
            other.close()
        a.run_retention()
        assert a._retention.index.surveyed
        assert [s.seq for s in a._retention.index.segments("p-0")] == [1, 3]
        a.run_retention()
        assert not a._retention.index.surveyed  # the mark is unchanged since


class CountingIO(FileIO):
    """Counts every call of the file layer (what a pass asks of the filesystem)."""

    calls = 0
    entries = 0  # directory entries listed


def _counted(name: str) -> Any:
    raw = FileIO.__dict__[name]
    static = isinstance(raw, staticmethod)
    real = raw.__func__ if static else raw

    def call(self: CountingIO, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        out = real(*args, **kwargs) if static else real(self, *args, **kwargs)
        if name == "listdir":
            self.entries += len(out)
        return out

    return call


for _name in ("open_create", "open_append", "read_file", "rename", "link", "unlink", "mkdir",
              "fsync", "fsync_dir", "fdatasync", "truncate", "listdir", "exists", "size",
              "atomic_write", "create_exclusive", "durable_unlink", "write_advisory"):  # fmt: skip
    if _name in FileIO.__dict__:
        setattr(CountingIO, _name, _counted(_name))


def test_a_pass_requests_do_not_grow_with_retained_segments(tmp_path: Path) -> None:
    """The same trigger-shaped work (one new segment, one ack, one pass) costs the same
    filesystem calls with 5 and with 50 retained segments in each of 4 partitions."""
    counts = []
    for retained in (5, 50):
        root = str(tmp_path / str(retained))
        writers = [QuiverStore.open(root, CFG, partition=f"p-{i}", background=False)
                   for i in range(4)]  # fmt: skip
        try:
            for wr in writers:
                publish(wr, retained)
            io = CountingIO()
            with QuiverStore.open(root, CFG, partition=None, io=io, background=False) as h:
                h.subscribers.register("slow")  # pins everything
                h.subscribers.register("fast")
                h.run_retention()  # surveys
                per_pass = []
                for k in range(3):
                    publish(writers[k % 4])
                    p = f"p-{k % 4}"
                    h.subscribers.record("fast", p, [retained + 1 + k // 4], Outcome.ACK)
                    io.calls = io.entries = 0
                    h.run_retention()
                    per_pass.append((io.calls, io.entries))
                counts.append(per_pass)
        finally:
            for wr in writers:
                wr.close()
    assert counts[0] == counts[1], f"(calls, entries listed) per pass, 5 vs 50 retained: {counts}"
    assert os.path.isdir(tmp_path / "50" / "segments" / "p-3")


def _brute_lag(reg: SubscriberRegistry, listing: dict[str, list[Seg]], now: int) -> dict[str, Any]:
    """Per subscriber: its lag (segments, bytes, age), then its head lag (segments,
    rows, age: above the highest seq it acknowledged in a partition) and its backlog
    (segments, bytes, rows, age: the rest, its age the oldest of the lag of the
    partitions that have one), each a walk of every segment."""

    def age(segs: list[Seg]) -> float:
        oldest = min((s.min_ingestion_ns for s in segs), default=None)
        return max(0, now - oldest) / 1e9 if oldest else 0

    out: dict[str, Any] = {}
    for sub in reg.subscribers():
        undone = [
            s for v in listing.values() for s in v if not reg.is_done(sub, s.partition, s.seq)
        ]
        top = {p: max([reg.hwm(sub, p), *reg.gaps(sub, p)]) for p in listing}
        head = [s for s in undone if s.seq > top[s.partition]]
        back = [s for s in undone if s.seq <= top[s.partition]]
        behind = {s.partition for s in back}  # its age: the oldest of such a partition's lag
        out[sub] = (
            (len(undone), sum(s.size_bytes for s in undone), age(undone)),
            (len(head), sum(s.rows for s in head), age(head)),
            (len(back), sum(s.size_bytes for s in back), sum(s.rows for s in back),
             age([s for s in undone if s.partition in behind])),
        )  # fmt: skip
    return out


@settings(max_examples=200, deadline=None)
@given(worlds(), st.integers(0, 2))
def test_lag_gauges_are_what_a_walk_of_every_segment_counts(w: dict[str, Any], extra: int) -> None:
    reg = in_memory_registry(w["parts"], w["subs"], w["deleted"])
    index = RetainedIndex.from_listing(w["listing"])
    listing = {p: list(v) for p, v in w["listing"].items()}
    now = w["now"] + 10 * HOUR
    for round_ in range(2):  # the second round reads remembered lags where nothing changed
        if round_:
            for p in w["parts"][-extra:] if extra else ():  # some segments retention took
                v = listing[p]
                for s in {v[0], v[len(v) // 2]} if v else ():  # the first and a middle one
                    v.remove(s)
                    index.remove({p: [s.seq]})
            for p in w["parts"][:extra]:  # a new segment in some partitions
                top = max([s.seq for s in w["listing"][p]], default=0) + 5
                seg = Seg(p, top, 77, 5 * HOUR, 5 * HOUR, 33)
                listing[p].append(seg)
                index._parts[p].append(seg)
        out = qm.Metrics()
        observe(out, reg, index, now)
        want = _brute_lag(reg, listing, now)
        groups = (
            (qm.LAG_SEGMENTS, qm.LAG_BYTES, qm.LAG_SECONDS),
            (qm.HEAD_LAG_SEGMENTS, qm.HEAD_LAG_ROWS, qm.HEAD_LAG_SECONDS),
            (qm.BACKLOG_SEGMENTS, qm.BACKLOG_BYTES, qm.BACKLOG_ROWS, qm.BACKLOG_SECONDS),
        )
        got = {
            sub: tuple(tuple(out.get(n, subscriber=sub) for n in names) for names in groups)
            for sub in reg.subscribers()
        }
        assert got == want
        for sub in reg.subscribers():
            for p in w["parts"]:
                gaps = reg.gaps(sub, p)
                assert out.get(qm.GAP_SET_SIZE, subscriber=sub, partition=p) == len(gaps)
