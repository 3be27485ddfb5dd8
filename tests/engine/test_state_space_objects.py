"""The state-space test with the store's root on an object store (the in-process
``memory://`` one): the same random operation sequences and the same model
(``tests/engine/state_model.py``) as ``test_state_space.py``, the WAL on local disk
(``wal.path``), every other object in the bucket.

Faults are object requests (``MemoryObjects.faults``): one that fails before it
happens (an ``OSError``; a 409 ``ObjectConflict``), one that succeeded and whose
response was lost (raised after it), and a stale listing (answered from the bucket as
it was when the fault was armed). Each has the two halves of the POSIX test: the
process goes on (the error surfaces, the caller retries or does other work; once the
fault cleared every handle works again and a live reader sees every acknowledged row
once), or the process dies. A killed process, and a power loss, abandon their handles:
the bucket keeps what each request did, the leases are not released, and a new handle
(a new ``QuiverStore.open`` on the same URL) recovers everything committed. The
invariants are the POSIX ones: no acknowledged row lost, none duplicated, nothing
undecided visible, nothing a subscriber still needs deleted.

Transactions are staged as the Spark sink stages them (ARCHITECTURE.md §12.6): after a
successful flush each durable transaction of that writer not staged yet is written to
the bucket with ``stage_txn`` (faults apply to it as to any request); only staged
transactions are reported, so only they win; one whose staging failed is a failed
task. A machine is lost (``lose_machine``): its writer dies and its local disk (WAL,
STATE, LOCK) goes, its LEASE left held by a host nobody here knows; the partition's
next writer, refused until the lease was seen unchanged for its ttl, or an observer's
``finalize_idle_partitions`` while no writer of it is open (checked right after its
pass), seals every committed staged row exactly once; undecided staged transactions
stay candidates; what only the WAL held is lost (never-staged transactions discarded,
rows outside transactions maybe). A damaged staged object is harmless while its writer
lives; with its machine lost it loses exactly its transaction's rows, named in the log,
an observer's ``idle_failures`` and fsck.

Lease holders cut off from the storage (``late_holders.py``): a rule holds a writer,
an observer sealing for a lost machine, a live consumer, a retention pass or the
driver's commit at its next request of one kind (each sequence walks the (request
kind, role) pairs), while a successor on another machine takes its lease over and
works, then delivers its requests late; another does the same with the holder's
machine suspended mid-request (its boot-time clock jumps past the lease ttl); a third
puts consumers and retention passes on machines whose wall clocks are hours off,
under a policy that expires idle subscribers. The report counts the holds per
(request kind, role), partitioned and suspended.

Four deterministic walks run in every profile: every (request kind, role) of a holder
is held once (partitioned and suspended, before and after the request in turn; the
test fails naming a pair that never fired); every skew role runs once ahead and once
behind; every known (request, object kind) pair has a fault fire, cycling through the
fault kinds and the two halves so that every fault kind fires in each half (the test
fails naming a pair or a fault kind that never fired); and one object of every kind in
``OBJECT_FLIP_KINDS`` has a byte flipped, with the outcome
:data:`~tests.engine.state_model.OBJECT_FLIP_OUTCOMES` states for it.

Profiles: the CI one by default (60 sequences of 30 steps and the walks, under a minute
on a loaded 2-core machine); ``QUIVER_SOAK=1`` (``make soak``) runs 300 random sequences
of 60 steps under the ``soak`` marker (``QUIVER_OBJECT_STATE_SPACE_EXAMPLES`` and
``..._STEPS`` override either).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from tests.engine import late_holders as lh
from tests.engine import state_model as sm
from tests.engine.state_model import SUBS, ObjectStoreHarness, Options
from tests.engine.test_state_space import APPS, SIZES, StoreStateSpace

WRITES = ("create", "replace", "put", "delete")

OBJECT_PAIRS: list[tuple[str, str]] = [
    tuple(pair.split(":"))  # type: ignore[misc]
    for pair in """
    create:acklog create:arrow create:commit create:meta create:readers-lease create:sub
    delete:arrow delete:meta
    get:acklog get:checkpoint get:commit get:lease get:manifest get:meta get:policy
    get:readers-lease get:store get:sub get:quarantine get:metrics
    head:arrow head:meta
    list:acklog list:segments list:sub list:subscribers put:metrics
    list:quarantine create:checkpoint get:arrow head:manifest
    create:readers get:readers
    replace:lease replace:manifest replace:readers-lease replace:sub replace:checkpoint
    create:staged delete:staged get:staged list:staged list:partitions
    """.split()
]
"""Every (request, object kind) the workload makes on an object root after a store and
its partitions exist (the report lists requests seen but missing here). ``head:manifest``
is met only when a damaged MANIFEST is rewritten, ``*:readers`` (the lost log) only
when a live consumer skips a damaged segment: their walk steps bring that about.
Staging (§12.6): a flushed transaction's object is created, listed by its writer's
recovery (``list:staged``) and by an observer pass (``list:partitions``), deleted once
sealed or decided against, and read (``get:staged``) only by whoever seals for a lost
machine: its walk step loses one."""

OBJECT_CREATION_PAIRS: list[tuple[str, str]] = [
    ("create", "store"), ("create", "policy"), ("create", "policy-copy"),
    ("head", "policy-copy"), ("get", "policy-copy"), ("create", "manifest"),
    ("create", "lease"), ("replace", "store"),
]  # fmt: skip
"""Requests met only while a store is created and its first writer opens and appends
(STORE, POLICY and its copy created once, a partition's MANIFEST and LEASE created by
its first writer, STORE replaced when the first append records the schema)."""


def fault_modes(op: str) -> tuple[str, ...]:
    """The fault kinds a request can meet: a 409 only on a write, staleness only on a
    listing."""
    if op == "list":
        return ("stale", "fail", "lost")
    if op in WRITES:
        return ("fail", "conflict", "lost")
    return ("fail", "lost")


class ObjectStateSpace(StoreStateSpace):
    """:class:`StoreStateSpace` on a ``memory://`` root: the same rules of work,
    crashes and reopen checks; object faults instead of file faults; no rules of the
    local file layer (torn tails, lost ``wal.path``, ``quiver fsck`` of moved files);
    lease holders partitioned from the storage or suspended, and machines whose wall
    clocks are off (``late_holders.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self._scenarios: lh.Scenarios | None = None
        self.next_held = 0

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self._scenarios is not None:
                self._scenarios.close()

    def scenarios(self) -> lh.Scenarios:
        assert isinstance(self.h, ObjectStoreHarness)
        if self._scenarios is None:
            self._scenarios = lh.Scenarios(self.h)
        return self._scenarios

    @initialize(
        flush=st.sampled_from(["group", "sync"]),
        policy=st.sampled_from([None, "backpressure", "drop_oldest"]),
        time_retention=st.booleans(),
        first_pair=st.sampled_from(range(len(OBJECT_PAIRS))),
    )
    def start(  # type: ignore[override]
        self, flush: str, policy: str | None, time_retention: bool, first_pair: int
    ) -> None:
        self.h = ObjectStoreHarness(
            self.tmp, Options(flush, "external", policy, time_retention, "local")
        )
        self.next_pair = first_pair
        self.next_held = first_pair  # held (request kind, role) pairs are walked from here

    # rules of the local file layer: not on this root
    def arm_fault(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    def lose_wal_path(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    def create_a_store_with_a_fault(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    def fault_next(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    def fault_next_and_go_on(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    def fault_next_and_die(self) -> None:  # type: ignore[override]
        raise AssertionError("not a rule here")

    @rule(
        kind=st.sampled_from(sm.OBJECT_FLIP_KINDS),
        index=st.integers(0, 50),
        frac=st.floats(0, 1),
    )
    def flip_byte(self, kind: str, index: int, frac: float) -> None:  # type: ignore[override]
        assert self.h is not None
        if len(self.h.damage) < 2 and kind not in ("store", "lease"):
            self._run(self.h.flip, kind, index, frac, False)

    @rule(
        data=st.data(),
        observer=st.booleans(),
        task=st.booleans(),
        decide=st.sampled_from(["commit", "commit", "none"]),
        damage=st.integers(0, 7),
    )
    def lose_machine(
        self, data: st.DataObject, observer: bool, task: bool, decide: str, damage: int
    ) -> None:
        """A writer's machine is lost (process and disk); the partition's next writer,
        or an observer's pass while none is open, seals what was committed and staged.
        Mostly a task of that writer (``task``) and the driver's commit of its batch
        (``decide``) come just before, so that committed rows are in no segment yet;
        now and then (``damage``) its newest staged object was damaged too."""
        h = self.h
        p = self._writer(data)
        if p is None:
            return
        app = data.draw(st.sampled_from(APPS), label="app")
        if task:
            before = len(h.txns)
            self._run(h.begin, p, app)
            if len(h.txns) > before and h.writers.get(p) is not None:
                self._run(h.txn_append, h.txns[-1], "base", data.draw(SIZES, label="n"))
                if h.writers.get(p) is not None:
                    self._run(h.flush, p)
        if decide == "commit" and h.reader is not None and h.writers.get(p) is not None:
            winners = [t for t in h.candidates(app) if data.draw(st.booleans(), label="wins")]
            self._run(h.commit, app, winners)
        if h.writers.get(p) is None or h.any_fired():
            return
        if damage == 0 and len(h.damage) < 2:
            assert isinstance(h, ObjectStoreHarness)
            # never one damaged already: a second flip of the same byte would repair it
            flipped = {d.path for d in h.damage}
            mine = [
                f
                for f in h.damage_files()["staged"]
                if f"/partitions/{p}/txns/" in f and f not in flipped
            ]
            if mine:
                h._flip_staged(0, 0.5, mine[-1], check=False)
        self._run(h.lose_machine, p, observer)

    @rule(
        pair=st.sampled_from(OBJECT_PAIRS + OBJECT_CREATION_PAIRS),
        mode=st.integers(0, 2),
        at=st.sampled_from([1, 1, 1, 2]),
        cont=st.integers(0, 3),
        sticky=st.integers(1, 3),
        retries=st.integers(0, 2),
    )
    def object_fault(
        self, pair: tuple[str, str], mode: int, at: int, cont: int, sticky: int, retries: int
    ) -> None:
        """A fault on the next request of one (request, object kind), then the work that
        reaches it."""
        modes = fault_modes(pair[0])
        self.fault_on_object(pair, modes[mode % len(modes)], at, cont > 0, sticky, retries)

    @rule(mode=st.integers(0, 2), cont=st.booleans())
    def object_fault_walking_the_pairs(self, mode: int, cont: bool) -> None:
        pair = OBJECT_PAIRS[self.next_pair % len(OBJECT_PAIRS)]
        self.next_pair += 1
        modes = fault_modes(pair[0])
        self.fault_on_object(pair, modes[mode % len(modes)], 1, cont, 1, 1)

    def fault_on_object(
        self, pair: tuple[str, str], mode: str, at: int, cont: bool, sticky: int, retries: int
    ) -> None:
        h = self.h
        assert isinstance(h, ObjectStoreHarness)
        sm.STATS["steps"] += 1
        op, kind = pair
        sm.STATS[f"targeted:{op}:{kind}:{mode}"] += 1
        if pair in OBJECT_CREATION_PAIRS:
            h.rule = "create_a_store_with_a_fault"
            h.create_with_fault(op, kind, mode, cont)  # type: ignore[arg-type]
            return
        if kind == "readers" and not self._prelude(op, kind):
            return  # no live consumer to skip a damaged segment here now
        h.arm_object(op, kind, mode, at=at, cont=cont, sticky_for=sticky, retries=retries)
        if (op, kind) == ("head", "manifest"):
            # met only by the rewrite of a damaged MANIFEST (§6.7): one is damaged now,
            # and the next writer open rewrites it
            files = h.damage_files()["manifest"]
            if files:
                h._flip(files[0], h._size(files[0]) // 2)
                h.manifest_damaged.add(files[0].split("/")[-2])
        self._reach(op, kind)

    def _reach(self, op: str, kind: str) -> None:
        """A ``.sub`` record and a consumer's lease are created only for a name never
        registered before: a new subscriber starts (and is removed again, so that it
        pins nothing); a staged object is read only for a lost machine: a committed
        transaction is staged and its machine lost (the finishers taken in turn); every
        other pair gets the rounds of work of the POSIX test."""
        h = self.h
        assert h is not None
        if (op, kind) == ("get", "staged"):
            live = [p for p in h.live_writers() if p not in h.damaged_parts]
            if live and h.reader is not None:
                self._commit_a_staged_txn(live[-1])
                if h.writers.get(live[-1]) is not None and not h.any_fired():
                    observer = self.next_pair % 2 == 0
                    self._run(h.lose_machine, live[-1], observer)
                if h.any_fired() or not h.active_faults():
                    return
        if (op, kind) == ("create", "checkpoint"):
            # a store makes its CHECKPOINT once; later ones replace it. The warm-up may
            # have made it already: it goes, and the next one is a create again (no
            # delta was deleted yet: deletion waits the horizon, §12.5, so nothing is lost)
            objects = h.bucket_objects()
            if objects.head("subscribers/CHECKPOINT") is not None:
                assert objects.list("subscribers/log/")[0].key.endswith(f"{1:020d}.ack")
                objects.delete("subscribers/CHECKPOINT")
        if op == "create" and kind in ("sub", "readers-lease"):
            name = f"n{sm.STATS['fresh_subscribers']}"
            sm.STATS["fresh_subscribers"] += 1
            self._run(h.register, name)
            if name in h.subs and h.reader is not None and not h.registry_broken:
                h.deregister(name)
            if h.any_fired() or not h.active_faults():
                return
        super()._reach(op, kind)

    # -- holders cut off from the storage, suspended machines, skewed wall clocks ------------
    @rule(phase=st.sampled_from(["before", "before", "after"]), choice=st.integers(0, 7))
    def partition_a_holder(self, phase: str, choice: int) -> None:
        """A lease holder's next request of one kind (and every later one) is held while
        a successor takes its lease over and works; then they go out late (each
        sequence walks the (request kind, role) pairs)."""
        self._hold_next(phase, False, choice)

    @rule(phase=st.sampled_from(["before", "after"]), choice=st.integers(0, 7))
    def suspend_a_holder(self, phase: str, choice: int) -> None:
        """As :meth:`partition_a_holder`, the holder's machine suspended in the middle of
        the request: its boot-time clock jumps past the lease ttl, its monotonic one not."""
        self._hold_next(phase, True, choice)

    def _hold_next(self, phase: str, suspend: bool, choice: int) -> None:
        request, role = lh.HELD_PAIRS[self.next_held % len(lh.HELD_PAIRS)]
        self.next_held += 1
        sm.STATS["steps"] += 1
        sm.STATS[f"rule:{'suspend' if suspend else 'partition'}_a_holder"] += 1
        self.scenarios().hold(request, role, phase, suspend, choice)

    @rule(
        role=st.sampled_from(["consumer", "retention", "gc"]),
        hours=st.sampled_from(lh.SKEW_HOURS),
        ahead=st.booleans(),
        choice=st.integers(0, 7),
        go=st.integers(0, 1),
    )
    def skew_wall_clocks(self, role: str, hours: int, ahead: bool, choice: int, go: int) -> None:
        """Machines whose wall clocks are hours ahead or behind consume and run retention
        under a policy that expires idle subscribers: nobody active is expired."""
        if go == 0:  # half the draws: the walk covers every role both ways
            sm.STATS["steps"] += 1
            sm.STATS["rule:skew_wall_clocks"] += 1
            self.scenarios().skew(role, hours if ahead else -hours, choice)

    def _commit_a_staged_txn(self, p: str) -> None:
        """A task writes a transaction to ``p`` (staged after its flush); the driver
        commits its batch."""
        h = self.h
        assert h is not None
        before = len(h.txns)
        self._run(h.begin, p, APPS[1])
        if len(h.txns) > before and h.writers.get(p) is not None:
            self._run(h.txn_append, h.txns[-1], "base", 7)
            if h.writers.get(p) is not None:
                self._run(h.flush, p)
        if h.reader is not None and not h.any_fired():
            self._run(h.commit, APPS[1], h.candidates(APPS[1]))


def _warm_up(m: ObjectStateSpace) -> None:
    """A store with history: segments in both partitions, a decided batch, both
    subscribers registered and acknowledging past a checkpoint of the ack log, a
    retention pass."""
    h = m.h
    assert h is not None
    for _ in range(2):
        for p in sm.PARTS:
            h.append(p, "base", 90)
            h.flush(p)
            h.finalize(p)
    t = h.begin("p-0", APPS[0])
    h.txn_append(t, "base", 7)
    h.flush("p-0")
    h.commit(APPS[0], [t])
    for sub in SUBS:
        h.register(sub)
        h.ack(sub, 2, "ack")
    h.retention(False, False)


def _options(i: int) -> Options:
    return Options(
        flush=("group", "sync")[i % 2],
        layout="external",
        policy=(None, "backpressure", "drop_oldest")[i % 3],
        time_retention=i % 4 == 3,
    )


def _warmed_up(i: int) -> ObjectStateSpace:
    """The ``i``-th store of a walk: started with the ``i``-th options, with history."""
    m = ObjectStateSpace()
    try:
        opts = _options(i)
        m.start(opts.flush, opts.policy, opts.time_retention, 0)
        _warm_up(m)
    except BaseException:
        m.teardown()
        raise
    return m


def walk_every_object_pair() -> dict[str, list[str]]:
    """Every known pair has a fault fire on a store with history, the fault kinds and
    the two halves taken in turn (pair ``i`` gets kind ``i`` of its kinds, and both
    halves for every kind over the walk). Returns what never fired: pairs, and fault
    kinds per half."""
    missed: dict[str, list[str]] = {"pairs": [], "kinds": []}
    pairs = [(p, False) for p in OBJECT_PAIRS] + [(p, True) for p in OBJECT_CREATION_PAIRS]
    for i, (pair, creation) in enumerate(pairs):
        modes = fault_modes(pair[0])
        mode = modes[i % len(modes)]
        cont = (i // len(modes)) % 2 == 0
        before = sum(n for k, n in sm.OBJ_FIRED.items() if k[:2] == pair)
        m = ObjectStateSpace()
        try:
            opts = _options(i)
            m.start(opts.flush, opts.policy, opts.time_retention, 0)
            if creation:
                m.fault_on_object(pair, mode, 1, cont, 1, 1)
            else:
                _warm_up(m)
                m.fault_on_object(pair, mode, 1, cont, 1, 1)
                m.a_swallowed_fault_still_ends_the_process()
                m.handles_work_again_once_a_fault_cleared()
            assert m.h is not None
            m.h.rule = "walk"
            m.h.kill_all()
            m.h.recover_and_check()
        finally:
            m.teardown()
        sm.STATS["walk_steps"] += 1
        if sum(n for k, n in sm.OBJ_FIRED.items() if k[:2] == pair) == before:
            missed["pairs"].append(f"{pair[0]}:{pair[1]} ({mode})")
    for mode in sm.OBJECT_FAULT_KINDS:
        for half in ("continued", "crashed"):
            if not any(k[2] == mode and k[3] == half for k in sm.OBJ_FIRED):
                missed["kinds"].append(f"{mode} ({half})")
    return missed


def _make_kind(m: ObjectStateSpace, kind: str) -> None:
    """Bring about an object of ``kind`` a store with history may lack."""
    h = m.h
    assert h is not None
    if kind == "staged":  # a committed transaction of p-1, staged, not sealed yet
        m._commit_a_staged_txn("p-1")
    elif kind == "checkpoint":
        for _ in range(8):
            if h.damage_files()["checkpoint"]:
                break
            h.append_compatible_everywhere()
            for sub in SUBS:
                h.consume_live(sub, 2)


def walk_every_object_flip() -> dict[str, str]:
    """A byte flipped in one object of every kind of ``OBJECT_FLIP_KINDS``, then every
    check. Returns what happened per kind: ``refused`` (a named refusal the model
    accepted), ``recovered``, or ``missing`` (no object of the kind to flip)."""
    seen: dict[str, str] = {}
    for i, kind in enumerate(sm.OBJECT_FLIP_KINDS):
        m = ObjectStateSpace()
        try:
            opts = _options(i)
            m.start(opts.flush, opts.policy, opts.time_retention, 0)
            _warm_up(m)
            _make_kind(m, kind)
            h = m.h
            assert h is not None
            h.rule = "flip"
            refusals = _refusals()
            if not h.flip(kind, i, 0.5, False):
                seen[kind] = "missing"
                continue
            if kind in ("arrow", "meta"):
                _read_damaged_segment(h)
            if kind == "staged":
                _staged_object_removed(h)
            h.rule = "walk"
            h.kill_all()
            h.recover_and_check()
            refused = _refusals() > refusals or h.registry_broken or bool(h.damaged_parts)
            seen[kind] = "refused" if refused else "recovered"
        finally:
            m.teardown()
        if kind == "staged":
            seen[kind] += "; " + _flip_staged_and_lose_its_machine(i)
    return seen


def _staged_object_removed(h: sm.StoreHarness) -> None:
    """The writer lived: it sealed the committed transaction's rows from its WAL and
    removed the damaged object."""
    assert isinstance(h, ObjectStoreHarness)
    if h.damage_files()["staged"] or any(d.kind == "staged" for d in h.damage):
        raise sm.DamageNotContained(
            f"a damaged staged object whose rows its writer sealed is left: {h.damage}"
        )


def _flip_staged_and_lose_its_machine(i: int) -> str:
    """A committed transaction's staged object is damaged and its machine lost, with an
    observer to seal for it: exactly its rows are lost, named (or ``silent``)."""
    m = ObjectStateSpace()
    try:
        opts = _options(i + 1)
        m.start(opts.flush, opts.policy, opts.time_retention, 0)
        _warm_up(m)
        _make_kind(m, "staged")
        h = m.h
        assert isinstance(h, ObjectStoreHarness)
        from quiver_spark.staging import staged_key

        t = h.txns[-1]
        assert t.staged and t.state == "won", t
        h.rule = "flip"
        named = sm.STATS["flips_refused_by_name:staged"]
        h._flip_staged(0, 0.5, f"{h.root}/{staged_key(t.partition, t.txn_id)}", check=False)
        h.lose_machine(t.partition, observer=True)
        h.rule = "walk"
        h.kill_all()
        h.recover_and_check()
        return "refused" if sm.STATS["flips_refused_by_name:staged"] > named else "silent"
    finally:
        m.teardown()


def _read_damaged_segment(h: sm.StoreHarness) -> None:
    """A new reader of the damaged segment (the model's own check reads a segment it
    already read from its fingerprint): it fails naming the damaged object."""
    from quiver_spark.errors import CorruptionError

    d = h.damage[-1]
    assert h.reader is not None and d.partition is not None and d.seq is not None
    loc = h.reader.segment_location
    try:
        with h.io.no_faults():
            meta = loc.read_meta(d.partition, d.seq)
            with loc.open(meta) as r:
                for _ in r.batches():
                    pass
    except CorruptionError as e:
        if not h._damage_named(e):
            raise sm.DamageNotContained(f"a damaged segment refused without its name: {e}") from e
        sm.STATS["segments_refused_naming_damage"] += 1
        return
    raise sm.DamageNotContained(f"a segment with a flipped byte reads without error: {d.path}")


def _refusals() -> int:
    """Refusals naming the damaged object the model accepted so far (an open, the
    registry, a partition's writer, a segment's reader)."""
    return sum(
        n
        for k, n in sm.STATS.items()
        if k.startswith("flips_refused_by_name:")
        or k
        in (
            "registry_refused_naming_damage",
            "partitions_refused_naming_damage",
            "segments_refused_naming_damage",
        )
    )


def test_every_object_kind_is_flipped_with_its_stated_outcome():
    """Damage to one object of every kind has the outcome OBJECT_FLIP_OUTCOMES states:
    refused naming the object, or recovered/fallen back, and every invariant holds."""
    seen = walk_every_object_flip()
    assert "missing" not in seen.values(), seen
    for kind, outcome in sm.OBJECT_FLIP_OUTCOMES.items():
        if "; with its machine lost too, refused by name" in outcome:
            want = {"recovered; refused"}
        elif " or recovered" in outcome:  # either, as the statement says
            want = {"refused", "recovered"}
        elif outcome.startswith("refused by name (") or outcome.startswith("refused by name,"):
            want = {"refused"}
        elif outcome.startswith("refused"):
            want = {"refused"}
        else:
            want = {"recovered"}
        assert seen[kind] in want, (kind, seen[kind], outcome)


def test_every_object_fault_kind_fires_in_the_walk():
    """Each (request, object kind) the workload makes has a fault fire, and each fault
    kind (failed, 409, lost response, stale listing) fires with the process going on and
    with it dying, every invariant holding after it."""
    missed = walk_every_object_pair()
    assert missed == {"pairs": [], "kinds": []}, missed


def test_every_held_request_kind_fires_for_every_role():
    """Each (request kind, role) of a lease holder, an observer sealing for a lost
    machine, a live consumer, a retention pass and the driver's commit is held while
    others go on (partitioned, and suspended: every role both ways), then delivered
    late; the late holder is refused or harmless and every invariant holds."""
    missed = lh.walk_every_held_pair(_warmed_up)
    assert missed == {"pairs": [], "modes": []}, missed


def test_machines_with_skewed_wall_clocks_expire_no_active_subscriber():
    """Consumers and retention passes (``run_retention``, ``quiver gc``) on machines
    hours ahead or behind, under a policy that expires idle subscribers: nobody
    acknowledging or live is expired."""
    assert lh.walk_every_skew(_warmed_up) == []


def _settings(examples: int, steps: int, **kw: object) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        **kw,  # type: ignore[arg-type]
    )


def test_object_state_space_ci_profile():
    """The short profile on an object root: deterministic sequences, no database."""
    run = ObjectStateSpace.TestCase("runTest")
    run.settings = _settings(
        int(os.environ.get("QUIVER_OBJECT_STATE_SPACE_EXAMPLES", "60")),
        int(os.environ.get("QUIVER_OBJECT_STATE_SPACE_STEPS", "30")),
        database=None,
        derandomize=True,
        phases=[Phase.generate],
    )
    run.runTest()


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_object_state_space_soak_profile():
    """The long profile (``make soak``): random sequences on an object root."""
    run = ObjectStateSpace.TestCase("runTest")
    run.settings = _settings(
        int(os.environ.get("QUIVER_OBJECT_STATE_SPACE_EXAMPLES", "300")),
        int(os.environ.get("QUIVER_OBJECT_STATE_SPACE_STEPS", "60")),
    )
    run.runTest()


@pytest.fixture(scope="module", autouse=True)
def object_state_space_report(request: pytest.FixtureRequest):
    for c in (sm.STATS, sm.FIRED, sm.OBJ_FIRED, sm.OBJ_SEEN, sm.RELAXED):
        c.clear()
    for c in (lh.HELD, lh.LATE, lh.OUTCOMES, lh.SKEWS):
        c.clear()
    t0 = time.monotonic()
    yield
    s = sm.STATS
    known = set(OBJECT_PAIRS) | set(OBJECT_CREATION_PAIRS)
    figures = {
        "sequences": s["sequences"],
        "steps": s["steps"],
        "reopen_checks": s["reopen_checks"],
        "live_checks": s["live_checks"],
        "object_faults": {
            k.split(":", 1)[1]: v for k, v in s.items() if k.startswith("object_faults:")
        },
        "fired": {":".join(k): v for k, v in sorted(sm.OBJ_FIRED.items())},
        "pairs_seen_not_known": sorted(f"{o}:{k}" for o, k in set(sm.OBJ_SEEN) - known),
        "flips": {k.removeprefix("flips:"): v for k, v in s.items() if k.startswith("flips")},
        "staging": {
            k: s[k]
            for k in (
                "txns_staged",
                "machine_losses",
                "machine_losses:observer",
                "machine_losses:writer",
                "machine_losses:committed_unsealed_txns",
                "machine_losses:undecided_staged_txns",
                "observer_seal_checks",
                "staged_damage_removed",
            )
        },
        "relaxations_used": dict(sm.RELAXED),
        "held": {
            f"{r}@{role}": f"{lh.HELD[r, role, 'partitioned']}/{lh.HELD[r, role, 'suspended']}"
            for r, role in lh.HELD_PAIRS
        },
        "held_never_fired": [
            f"{r}@{role}"
            for r, role in lh.HELD_PAIRS
            if not any(lh.HELD[r, role, mode] for mode in lh.MODES)
        ],
        "held_outcomes": {f"{role}:{o}": n for (role, o), n in sorted(lh.OUTCOMES.items())},
        "late_requests": {f"{r}@{role}": n for (r, role), n in sorted(lh.LATE.items())},
        "suspends": sum(n for k, n in lh.HELD.items() if k[2] == "suspended"),
        "skews": {f"{role}:{d}": n for (role, d), n in sorted(lh.SKEWS.items())},
        "held_other": {
            k: s[k] for k in sorted(s) if k.startswith("held") or k.startswith("expiry")
        },
        "wall_s": round(time.monotonic() - t0, 1),
    }
    line = "object state space: " + json.dumps(figures, sort_keys=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(line)
    out = os.environ.get("QUIVER_OBJECT_STATE_SPACE_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(figures, f, indent=1)
