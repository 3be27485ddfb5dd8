"""What the state-space tests run besides random sequences, and how they run and report:
the deterministic walks of each root, the profiles (CI and soak) and the figures
printed at the end of a test module (the machine: ``state_space_machine.py``).

Each step of a walk is a fresh store of the root (the ``i``-th options of
:attr:`~tests.engine.state_space_machine.Root.walk_options`), mostly with history
(:func:`warm_up`), then one fault, hold or flipped byte, then every check: the
invariants in the same process and, after every handle was killed, a reopen.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.engine import late_holders as lh
from tests.engine import state_model as sm
from tests.engine.state_model import APPS, SUBS, ObjectStoreHarness, Options
from tests.engine.state_space_machine import (
    OBJECT_CREATION_PAIRS,
    OBJECT_PAIRS,
    POSIX_PAIRS,
    ObjectStateSpace,
    StateSpace,
    StoreStateSpace,
    fault_modes,
)

# -- profiles ----------------------------------------------------------------------------------
PROFILES = {
    StoreStateSpace: {"ci": (200, 40), "soak": (400, 80), "env": "QUIVER_STATE_SPACE"},
    ObjectStateSpace: {"ci": (60, 30), "soak": (300, 60), "env": "QUIVER_OBJECT_STATE_SPACE"},
}
"""Sequences x steps per profile (``<env>_EXAMPLES`` and ``<env>_STEPS`` override)."""


def run_profile(machine: type[StateSpace], profile: str, **kw: Any) -> None:
    """Random sequences of ``machine``: ``ci`` derandomized, without a database, not
    shrunk (shrinking many distinct failures takes minutes: CI reports them raw, the
    shrunk ones are the regression tests; ``QUIVER_STATE_SPACE_SHRINK=1`` shrinks);
    ``soak`` random, with the example database ``kw`` names (hypothesis's own else)."""
    p = PROFILES[machine]
    examples, steps = p[profile]
    if profile == "ci":
        shrink = os.environ.get("QUIVER_STATE_SPACE_SHRINK")
        kw.update(
            database=None,
            derandomize=True,
            phases=list(Phase) if shrink else [Phase.generate],
        )
    run = machine.TestCase("runTest")
    run.settings = settings(
        max_examples=int(os.environ.get(f"{p['env']}_EXAMPLES", examples)),
        stateful_step_count=int(os.environ.get(f"{p['env']}_STEPS", steps)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        **kw,
    )
    run.runTest()


# -- one step of a walk --------------------------------------------------------------------------
def warm_up(m: StateSpace) -> None:
    """A store with history: segments in both partitions, a decided batch, both
    subscribers registered and acknowledging (the ack log checkpointed), retention."""
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


@contextmanager
def walked(machine: type[StateSpace], opts: Options, warm: bool = True) -> Iterator[StateSpace]:
    """A machine on a store of ``opts`` (with history unless not ``warm``) for one step
    of a walk; once the step is done, every handle dies and the reopen is checked."""
    m = machine()
    try:
        m.open_root(opts)
        if warm:
            warm_up(m)
        yield m
        m.h.rule = "walk"
        m.h.kill_all()
        m.h.recover_and_check()
    finally:
        m.teardown()


def warmed_up(machine: type[StateSpace]) -> Callable[[int], StateSpace]:
    """The ``i``-th store of a walk of ``late_holders.py``: started, with history (the
    walk checks and tears it down)."""

    def make(i: int) -> StateSpace:
        m = machine()
        try:
            m.open_root(machine.root.walk_options(i, None))
            warm_up(m)
        except BaseException:
            m.teardown()
            raise
        return m

    return make


def invariants(m: StateSpace) -> None:
    m.a_swallowed_fault_still_ends_the_process()
    m.handles_work_again_once_a_fault_cleared()


def make_kind(m: StateSpace, kind: str) -> None:
    """Bring about a file or object of ``kind`` that a store with history may lack."""
    h = m.h
    assert h is not None
    if kind == "quarantine":  # a damaged segment moved aside: its reason and the mark
        h.flip("arrow", 0, 0.5, quarantine=True)
    elif kind == "readers":  # a live consumer skips a damaged segment and logs it
        h.flip("arrow", 0, 0.5, quarantine=False)
        h.consume_live(SUBS[0], 4)
    elif kind == "heartbeat":  # written by a writer's maintenance tick
        for p in h.live_writers():
            h.maintain(p)
    elif kind == "staged":  # a committed transaction of p-1, staged, not sealed yet
        m.commit_a_staged_txn("p-1")
    elif kind == "checkpoint":
        for _ in range(8):
            if h.damage_files()["checkpoint"]:
                break
            h.append_compatible_everywhere()
            for sub in SUBS:
                h.consume_live(sub, 2)


# -- the walks of a POSIX root ---------------------------------------------------------------------
def walk_every_pair(only: set[str] | None = None, shapes: int = 1) -> dict[str, list[str]]:
    """For every known pair, in both halves (the error surfaces and the process goes on;
    the process dies), a store with history, a fault armed on the pair's next operation
    and the work that reaches it, then every check. Returns the pairs whose fault never
    fired, per half (``only``: these ``op:kind`` alone; ``shapes``: that many store
    shapes, errnos and torn writes per pair and half)."""
    missed: dict[str, list[str]] = {"continued": [], "crashed": []}
    for i, pair in enumerate(POSIX_PAIRS):
        if only is not None and ":".join(pair) not in only:
            continue
        for cont, shape in ((c, s) for s in range(shapes) for c in (1, 0)):
            mode = "continued" if cont else "crashed"
            before = sm.FIRED[(*pair, mode)]
            j = i + cont + 5 * shape
            with walked(StoreStateSpace, StoreStateSpace.root.walk_options(j, pair)) as m:
                m.fault_next(pair, 1, (errno.EIO, errno.ENOSPC)[j % 2], j % 4 == 1, cont, 0, 1)
                invariants(m)
            sm.STATS["walk_steps"] += 1
            if sm.FIRED[(*pair, mode)] == before:
                missed[mode].append(":".join(pair))
    return missed


def walk_every_flip() -> list[str]:
    """A byte flipped in one file of every kind of ARCHITECTURE.md §22 (segments and
    the quarantine mark also on the remote location, the readers' lost log by name),
    then every check. Returns the kinds no file could be found for."""
    missed = []
    for i, kind in enumerate(sm.FLIP_KINDS):
        remotes = (False, True) if kind in ("arrow", "meta", "quarantine") else (False,)
        for remote in remotes:
            opts = StoreStateSpace.root.walk_options(i, ("flip", kind))
            opts.segments = "remote" if remote else "local"
            with walked(StoreStateSpace, opts) as m:
                make_kind(m, kind)
                h = m.h
                h.rule = "flip"
                files = h.damage_files()[kind]
                lost = [j for j, f in enumerate(files) if f.endswith(".lost.jsonl")]
                index = lost[0] if lost else i
                if not h.flip(kind, index, 0.5, quarantine=i % 2 == 0):
                    missed.append(kind + (" (remote)" if remote else ""))
                elif lost:
                    sm.STATS["flips:readers-lost-log"] += 1
    return missed


# -- the walks of an object root -------------------------------------------------------------------
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
        opts = ObjectStateSpace.root.walk_options(i, None)
        with walked(ObjectStateSpace, opts, warm=not creation) as m:
            m.fault_on_object(pair, mode, 1, cont, 1, 1)
            if not creation:
                invariants(m)
        sm.STATS["walk_steps"] += 1
        if sum(n for k, n in sm.OBJ_FIRED.items() if k[:2] == pair) == before:
            missed["pairs"].append(f"{pair[0]}:{pair[1]} ({mode})")
    for mode in sm.OBJECT_FAULT_KINDS:
        for half in ("continued", "crashed"):
            if not any(k[2] == mode and k[3] == half for k in sm.OBJ_FIRED):
                missed["kinds"].append(f"{mode} ({half})")
    return missed


def walk_every_object_flip() -> dict[str, str]:
    """A byte flipped in one object of every kind of ``OBJECT_FLIP_KINDS``, then every
    check. Returns what happened per kind: ``refused`` (a named refusal the model
    accepted), ``recovered``, or ``missing`` (no object of the kind to flip)."""
    seen: dict[str, str] = {}
    for i, kind in enumerate(sm.OBJECT_FLIP_KINDS):
        with walked(ObjectStateSpace, ObjectStateSpace.root.walk_options(i, None)) as m:
            make_kind(m, kind)
            h = m.h
            h.rule = "flip"
            refusals = _refusals()
            if not h.flip(kind, i, 0.5, False):
                seen[kind] = "missing"
                continue
            if kind in ("arrow", "meta"):
                _read_damaged_segment(h)
            if kind == "staged":
                _staged_object_removed(h)
        refused = _refusals() > refusals or h.registry_broken or bool(h.damaged_parts)
        seen[kind] = "refused" if refused else "recovered"
        if kind == "staged":
            seen[kind] += "; " + _flip_staged_and_lose_its_machine(i)
    return seen


def _staged_object_removed(h: ObjectStoreHarness) -> None:
    """The writer lived: it sealed the committed transaction's rows from its WAL and
    removed the damaged object."""
    if h.damage_files()["staged"] or any(d.kind == "staged" for d in h.damage):
        raise sm.DamageNotContained(
            f"a damaged staged object whose rows its writer sealed is left: {h.damage}"
        )


def _flip_staged_and_lose_its_machine(i: int) -> str:
    """A committed transaction's staged object is damaged and its machine lost, with an
    observer to seal for it: exactly its rows are lost, named (or ``silent``)."""
    from quiver_spark.staging import staged_key

    with walked(ObjectStateSpace, ObjectStateSpace.root.walk_options(i + 1, None)) as m:
        make_kind(m, "staged")
        h = m.h
        t = h.txns[-1]
        assert t.staged and t.state == "won", t
        h.rule = "flip"
        named = sm.STATS["flips_refused_by_name:staged"]
        h._flip_staged(0, 0.5, f"{h.root}/{staged_key(t.partition, t.txn_id)}", check=False)
        h.lose_machine(t.partition, observer=True)
    return "refused" if sm.STATS["flips_refused_by_name:staged"] > named else "silent"


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


def expected_flip_outcomes(outcome: str) -> set[str]:
    """What the object flip walk may see for a kind whose stated outcome is ``outcome``
    (:data:`~tests.engine.state_model.OBJECT_FLIP_OUTCOMES`)."""
    if "; with its machine lost too, refused by name" in outcome:
        return {"recovered; refused"}
    if " or recovered" in outcome:  # either, as the statement says
        return {"refused", "recovered"}
    if outcome.startswith("refused"):
        return {"refused"}
    return {"recovered"}


# -- the figures printed at the end of a module ----------------------------------------------------
def report(
    request: pytest.FixtureRequest,
    label: str,
    env: str,
    figures: Callable[[float], tuple[dict[str, Any], dict[str, Any]]],
) -> Iterator[None]:
    """The body of a module's report fixture: counters cleared, the module's tests run,
    then ``<label>: <figures as JSON>`` on the terminal and, when ``env`` names a file,
    the figures (and ``figures``' details for the file) there."""
    for c in (sm.STATS, sm.FIRED, sm.SEEN, sm.RELAXED, sm.OBJ_FIRED, sm.OBJ_SEEN):
        c.clear()
    sm.FAULT_POINTS.clear()
    for c in (lh.HELD, lh.LATE, lh.OUTCOMES, lh.SKEWS):
        c.clear()
    t0 = time.monotonic()
    yield
    shown, details = figures(round(time.monotonic() - t0, 1))
    line = f"{label}: " + json.dumps(shown, sort_keys=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(line)
    out = os.environ.get(env)
    if out:
        with open(out, "w") as f:
            json.dump({**shown, **details}, f, indent=1)


def _by_prefix(s: dict[str, int], prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: v for k, v in sorted(s.items()) if k.startswith(prefix)}


def _per_pair() -> dict[str, str]:
    """``op:kind`` -> ``continued/crashed`` fired counts."""
    out: dict[str, list[int]] = {}
    for (op, kind, mode), n in sm.FIRED.items():
        out.setdefault(f"{op}:{kind}", [0, 0])[mode == "crashed"] += n
    return {k: f"{c}/{x}" for k, (c, x) in sorted(out.items())}


def posix_figures(wall_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sequences x steps, faults fired per (operation, file kind) continued/crashed,
    pairs never fired, live and reopen checks per rule, byte flips per kind,
    relaxations used, the catch-up states live consumers went through; for the file
    also every fault point and pair seen."""
    s = sm.STATS
    fired = {(o, k) for o, k, _ in sm.FIRED}
    figures = {
        "sequences": s["sequences"],
        "steps": s["steps"],
        "invariant_checks": s["invariant_checks"],
        "faults_armed": s["faults_armed"],
        "faults_fired": s["faults_fired"],
        "distinct_fault_points": len(sm.FAULT_POINTS),
        "crash_states": _by_prefix(s, "crash_state:"),
        "flips": _by_prefix(s, "flips:"),
        "wal_path_losses": s["wal_path_losses"],
        "kills": s["kills"],
        "wall_s": wall_s,
        "faults_continued": s["faults_continued"],
        "faults_crashed": s["faults_crashed"],
        "fired_per_op_kind": _per_pair(),
        "pairs_known": len(POSIX_PAIRS),
        "pairs_fired": len(fired),
        "pairs_never_fired": sorted(f"{o}:{k}" for o, k in set(POSIX_PAIRS) - fired),
        "pairs_seen_not_known": sorted(f"{o}:{k}" for o, k in set(sm.SEEN) - set(POSIX_PAIRS)),
        "live_checks": _by_prefix(s, "live_checks:"),
        "reopen_checks": _by_prefix(s, "reopen_checks:"),
        "relaxations_used": dict(sm.RELAXED),
        "targeted": _by_prefix(s, "targeted:"),
        "rules": _by_prefix(s, "rule:"),
        "catch_up": _by_prefix(s, "catch_up:"),
        "other": {k: v for k, v in sorted(s.items()) if ":" not in k},
    }
    details = {
        "fault_points": sorted(map(list, sm.FAULT_POINTS)),
        "seen": {f"{o}:{k}": n for (o, k), n in sorted(sm.SEEN.items())},
    }
    return figures, details


def object_figures(wall_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Faults per (request, object kind, fault kind, half), staging and lost machines,
    holds per (request kind, role) partitioned/suspended and their outcomes, late
    requests, suspends, skews, relaxations used, the catch-up states explored."""
    s = sm.STATS
    known = set(OBJECT_PAIRS) | set(OBJECT_CREATION_PAIRS)
    staging = (
        "txns_staged",
        "machine_losses",
        "machine_losses:observer",
        "machine_losses:writer",
        "machine_losses:committed_unsealed_txns",
        "machine_losses:undecided_staged_txns",
        "observer_seal_checks",
        "staged_damage_removed",
    )
    figures = {
        "sequences": s["sequences"],
        "steps": s["steps"],
        "reopen_checks": s["reopen_checks"],
        "live_checks": s["live_checks"],
        "object_faults": _by_prefix(s, "object_faults:"),
        "fired": {":".join(k): v for k, v in sorted(sm.OBJ_FIRED.items())},
        "pairs_seen_not_known": sorted(f"{o}:{k}" for o, k in set(sm.OBJ_SEEN) - known),
        "flips": {k.removeprefix("flips:"): v for k, v in s.items() if k.startswith("flips")},
        "staging": {k: s[k] for k in staging},
        "relaxations_used": dict(sm.RELAXED),
        "catch_up": _by_prefix(s, "catch_up:"),
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
        "wall_s": wall_s,
    }
    return figures, {}
