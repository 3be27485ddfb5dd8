"""Exploring the state space is the test: random operation sequences over the public
engine API, with faults, crashes, lost directories and damage, checked against a model
after every reopen (the model and its invariants: ``tests/engine/state_model.py``).

Two writers (partitions ``p-0`` and ``p-1``, separate store handles), a driver
handle deciding transactions of two queries, two subscribers, retention under the
store's size-cap policy and time retention, ``quiver gc`` and ``quiver fsck
--quarantine``. Batch and transaction sizes straddle ``segment.target_size`` and
``wal.max_size``; schemas vary in nullability, metadata, dictionary encoding, an extra
column and an incompatible type. Faults: kill, power loss (every crash state kind of
:class:`~tests.faults.CrashSimulator`), EIO/ENOSPC on a chosen operation (optionally
torn), loss of ``wal.path``, a flipped byte in every kind of file. Segments live in the
store or on an fsspec location (``faultmem://``) whose requests fail like local I/O.

An injected I/O fault has two halves. Fault-and-crash: the process dies, everything is
reopened and checked. Fault-and-continue: the error surfaces to the caller, which
retries the same call or goes on with other work (an ENOSPC may stay for a few calls,
then the disk frees up); once the fault cleared, every surviving handle must work again
within :data:`~tests.engine.state_model.RETRIES` calls and a live reader in the same
process must see every acknowledged row once and nothing undecided (the live check);
the next reopen must agree with what the live reader saw. Targeted rules arm a fault on
the next operation of one (operation, file kind) pair and do the work that reaches it
(a WAL replayed by a new writer, a live consumer polling, reading and acknowledging, a
torn WAL or ack-log tail for recovery to cut, a subscriber that leaves and registers
again, a damaged segment for ``quiver fsck --quarantine`` to move aside, a store being
created); each sequence walks the pairs of ``KNOWN_PAIRS``.

Besides the random sequences, two deterministic walks run in every profile: every known
pair has its fault fire once in each half on a store with history (and the test fails
naming any pair that did not fire: a pair the workload stopped meeting), and one file
of every kind of ARCHITECTURE.md §11 has a byte flipped (segments and the quarantine
mark also on the remote location, the readers' lost log by name). Relaxations for
defects being fixed elsewhere are all in :data:`~tests.engine.state_model.PENDING_FIXES`.

Profiles: the CI one runs by default (200 sequences of 40 steps and the walks, about
1.5 minutes on a loaded 2-core machine); ``QUIVER_SOAK=1`` (``make soak``) runs the
long one (400 random sequences of 80 steps) under the ``soak`` marker. The figures of the run
(sequences x steps, faults fired per (operation, file kind) continued/crashed, pairs
never fired, live and reopen checks per rule, byte flips per kind, relaxations used) are
printed at the end of the module. Shrunk failures live on as ``test_state_space_regressions.py``.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.engine import state_model as sm
from tests.engine.state_model import (
    APPS,
    ROW_SIZES,
    SUBS,
    Crashed,
    Faulted,
    Options,
    StoreHarness,
)

SOAK = os.environ.get("QUIVER_SOAK") == "1"

SIZES = st.sampled_from(sorted(ROW_SIZES.values()))
VARIANT = st.sampled_from(
    ["base"] * 6 + ["nullable", "nullable", "meta", "dict", "newcol", "badtype"]
)
OPS = ["write", "fsync", "rename", "unlink", "open", "fsync_dir", "truncate", "chmod", "mkdir"]
WHERE = [None, "/wal/", "/segments/", "/subscribers/", "/commits/", "STATE"]
KNOWN_PAIRS: list[tuple[str, str]] = [
    tuple(pair.split(":"))  # type: ignore[misc]
    for pair in """
    chmod:arrow chmod:meta flock:lock
    fsync:acklog fsync:arrow fsync:checkpoint fsync:commit fsync:meta fsync:policy
    fsync:state fsync:store fsync:wal fsync_dir:dir fsync_dir:wal link:commit
    listdir:dir listdir:wal mkdir:dir mkdir:wal
    open:acklog open:arrow open:checkpoint open:commit open:heartbeat open:meta
    open:lock open:metrics open:policy open:state open:store open:wal
    read:acklog read:checkpoint read:commit read:meta read:policy read:quarantine
    read:state read:store read:wal
    rename:acklog rename:arrow rename:checkpoint rename:heartbeat rename:meta
    rename:metrics rename:state rename:store
    stat:arrow stat:dir stat:meta stat:wal truncate:wal
    unlink:acklog unlink:arrow unlink:commit unlink:meta unlink:wal
    write:acklog write:arrow write:checkpoint write:commit write:heartbeat write:meta
    write:metrics write:policy write:state write:store write:wal
    listdir:remote-dir mkdir:remote-dir read:remote-arrow read:remote-meta
    read:remote-quarantine rename:remote-meta stat:remote-arrow stat:remote-meta
    unlink:remote-arrow unlink:remote-meta write:remote-arrow write:remote-meta
    fsync:sub link:sub open:sub read:sub unlink:sub write:sub stat:checkpoint
    stat:quarantine truncate:acklog rename:remote-arrow rename:remote-quarantine
    stat:remote-quarantine unlink:remote-quarantine write:remote-quarantine rename:sub
    open:policy-copy write:policy-copy fsync:policy-copy
    open:readers write:readers
    link:store link:policy link:policy-copy stat:store stat:policy stat:policy-copy
    unlink:store unlink:policy unlink:policy-copy read:policy-copy
    stat:commit stat:sub read:metrics
    open:manifest write:manifest fsync:manifest link:manifest stat:manifest
    unlink:manifest read:manifest rename:manifest
    """.split()
]
"""Every (operation, file kind) the file layer performs in this workload (the report
lists pairs seen but missing here, and pairs here that never fired)."""

REACH_ROUNDS = 3
"""Rounds of work a targeted fault gets to fire in."""


def fsck_work(op: str, kind: str) -> bool:
    """Pairs only ``quiver fsck --quarantine`` meets: moving a remote segment aside."""
    return (kind == "remote-quarantine" and op != "read") or (op, kind) == (
        "rename",
        "remote-arrow",
    )


CREATION_PAIRS: list[tuple[str, str]] = [
    ("mkdir", "dir"), ("mkdir", "wal"), ("open", "store"), ("write", "store"),
    ("fsync", "store"), ("stat", "store"), ("link", "store"), ("unlink", "store"),
    ("rename", "store"), ("open", "policy"), ("write", "policy"), ("fsync", "policy"),
    ("stat", "policy"), ("link", "policy"), ("unlink", "policy"), ("fsync_dir", "dir"),
    ("open", "state"), ("write", "state"), ("rename", "state"), ("open", "wal"),
    ("write", "wal"), ("fsync", "wal"), ("open", "lock"), ("open", "policy-copy"),
    ("write", "policy-copy"), ("fsync", "policy-copy"), ("stat", "policy-copy"),
    ("link", "policy-copy"), ("unlink", "policy-copy"), ("read", "policy-copy"),
    ("link", "manifest"), ("unlink", "manifest"),
]  # fmt: skip
"""Pairs met when a store and its first partition are created (STORE, POLICY and
POLICY.copy are created by fsync + link of a temporary file, which is then unlinked;
STORE is replaced, under the flock of ``.objects.lock``, when the first append records
the schema; the first writer of a partition creates its MANIFEST the same way)."""

CREATION_ONLY = {
    pair for pair in CREATION_PAIRS if pair[1] in ("store", "policy", "policy-copy")
} - {("read", "store"), ("read", "policy")} | {
    ("mkdir", "wal"),
    ("mkdir", "dir"),
    ("link", "manifest"),
    ("unlink", "manifest"),
}
"""Of those, the pairs no later work meets (STORE and POLICY are written once, the
directories of a store and a partition made once, a partition's MANIFEST created once:
later changes replace it)."""


class StoreStateSpace(RuleBasedStateMachine):
    """Drives :class:`StoreHarness`; a rule's injected fault ends in a crash + check."""

    def __init__(self) -> None:
        super().__init__()
        self.h: StoreHarness | None = None
        self.tmp = tempfile.mkdtemp(prefix="qstate-")

    def teardown(self) -> None:
        if self.h is not None:
            self.h.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(
        flush=st.sampled_from(["group", "sync"]),
        layout=st.sampled_from(["default", "external"]),
        policy=st.sampled_from([None, "backpressure", "drop_oldest"]),
        time_retention=st.booleans(),
        segments=st.sampled_from(["local", "local", "remote"]),
        # an index drawn like an element: integers over a wide range favour boundary
        # values (0, powers of two), which left most pairs without a turn
        first_pair=st.sampled_from(range(len(KNOWN_PAIRS))),
    )
    def start(
        self,
        flush: str,
        layout: str,
        policy: str | None,
        time_retention: bool,
        segments: str,
        first_pair: int,
    ) -> None:
        self.h = StoreHarness(self.tmp, Options(flush, layout, policy, time_retention, segments))
        self.next_pair = first_pair  # targeted faults walk the pairs from here

    def _walk_pair(self) -> tuple[str, str]:
        """The next pair this store can meet (segments are either local or remote)."""
        assert self.h is not None
        remote = self.h.opts.segments == "remote"
        for _ in range(len(KNOWN_PAIRS)):
            pair = KNOWN_PAIRS[self.next_pair % len(KNOWN_PAIRS)]
            self.next_pair += 1
            if remote and local_segments_only(pair):
                continue  # no .arrow/.meta in the store directory
            if pair[1].startswith("remote-") and not remote:
                continue
            return pair
        return pair

    # -- plumbing ------------------------------------------------------------------------
    def _run(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        assert self.h is not None
        sm.STATS["steps"] += 1
        self.h.rule = fn.__name__
        sm.STATS[f"rule:{fn.__name__}"] += 1
        try:
            fn(*args)
        except Faulted:
            self.h.continued()
        except Crashed:
            self.h.crashed()
        except sm.Outage:
            pass

    def _writer(self, data: st.DataObject) -> str | None:
        assert self.h is not None
        live = self.h.live_writers()
        return data.draw(st.sampled_from(live), label="partition") if live else None

    # -- writes --------------------------------------------------------------------------
    @rule(data=st.data(), variant=VARIANT, n=SIZES, huge=st.integers(0, 30))
    def append(self, data: st.DataObject, variant: str, n: int, huge: int) -> None:
        p = self._writer(data)
        if p is not None:
            self._run(self.h.append, p, variant, sm.HUGE_ROWS if huge == 0 else n)

    @rule(data=st.data(), variant=VARIANT, n=SIZES, flush=st.booleans())
    def append_more(self, data: st.DataObject, variant: str, n: int, flush: bool) -> None:
        # appends dominate real workloads: a second append rule doubles their weight
        p = self._writer(data)
        if p is not None:
            self._run(self.h.append, p, variant, n)
            if flush and self.h.writers.get(p) is not None:
                self._run(self.h.flush, p)

    @rule(data=st.data(), variant=VARIANT, n=SIZES)
    def txn_write(self, data: st.DataObject, variant: str, n: int) -> None:
        """A task: begin, append, flush (its records durable before it reports)."""
        p = self._writer(data)
        if p is None:
            return
        app = data.draw(st.sampled_from(APPS), label="app")
        before = len(self.h.txns)
        self._run(self.h.begin, p, app)
        if len(self.h.txns) > before and self.h.writers.get(p) is not None:
            self._run(self.h.txn_append, self.h.txns[-1], variant, n)
            if self.h.writers.get(p) is not None:
                self._run(self.h.flush, p)

    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        p = self._writer(data)
        if p is not None:
            self._run(self.h.flush, p)

    @rule(data=st.data(), app=st.sampled_from(APPS))
    def begin_txn(self, data: st.DataObject, app: str) -> None:
        p = self._writer(data)
        if p is not None:
            self._run(self.h.begin, p, app)

    @rule(data=st.data(), variant=VARIANT, n=SIZES)
    def txn_append(self, data: st.DataObject, variant: str, n: int) -> None:
        txns = self.h.open_txns()
        if txns:
            t = data.draw(st.sampled_from(txns), label="txn")
            self._run(self.h.txn_append, t, variant, n)

    @rule(data=st.data(), app=st.sampled_from(APPS))
    def commit(self, data: st.DataObject, app: str) -> None:
        cands = self.h.candidates(app)
        winners = [t for t in cands if data.draw(st.booleans(), label="wins")]
        self._run(self.h.commit, app, winners)

    @rule(app=st.sampled_from(APPS), discard=st.booleans())
    def abandon(self, app: str, discard: bool) -> None:
        self._run(self.h.abandon, app)
        if discard:
            self._run(self.h.discard_abandoned, app)

    @rule(data=st.data(), tick=st.booleans())
    def finalize_or_tick(self, data: st.DataObject, tick: bool) -> None:
        p = self._writer(data)
        if p is not None:
            self._run(self.h.maintain if tick else self.h.finalize, p)

    # -- subscribers and retention ----------------------------------------------------------
    @rule(sub=st.sampled_from(SUBS))
    def register(self, sub: str) -> None:
        self._run(self.h.register, sub)

    @rule(sub=st.sampled_from(SUBS), count=st.integers(1, 4), nack=st.integers(0, 5))
    def read_and_ack(self, sub: str, count: int, nack: int) -> None:
        if sub not in self.h.subs:
            self._run(self.h.register, sub)
        self._run(self.h.ack, sub, count, "nack" if nack == 0 else "ack")

    @rule(sub=st.sampled_from(SUBS), count=st.integers(1, 8), nack=st.integers(0, 3))
    def consume(self, sub: str, count: int, nack: int) -> None:
        # consumers keep up in real deployments: a second consumer rule doubles their share
        if sub not in self.h.subs:
            self._run(self.h.register, sub)
        self._run(self.h.ack, sub, count, "nack" if nack == 0 else "ack")

    @rule(expire=st.integers(0, 4), via_gc=st.booleans())
    def retention(self, expire: int, via_gc: bool) -> None:
        if self.h.reader is not None and not self.h.registry_broken:
            self._run(self.h.retention, expire == 0, via_gc)

    # -- crashes, faults, lost directories, damage ---------------------------------------------
    @rule(data=st.data(), reopen=st.booleans())
    def kill(self, data: st.DataObject, reopen: bool) -> None:
        p = self._writer(data)
        if p is not None:
            sm.STATS["steps"] += 1
            self.h.kill(p)
            if reopen:
                self.h.recover_and_check()

    @rule()
    def reopen(self) -> None:
        sm.STATS["steps"] += 1
        self.h.kill_all()
        self.h.recover_and_check()

    @rule(
        op=st.sampled_from(OPS),
        at=st.integers(1, 4),
        err=st.sampled_from([errno.EIO, errno.ENOSPC]),
        partial=st.booleans(),
        where=st.sampled_from(WHERE),
    )
    def arm_fault(self, op: str, at: int, err: int, partial: bool, where: str | None) -> None:
        sm.STATS["steps"] += 1
        self.h.arm(op, at, err, partial and op == "write", where)

    @rule(
        pair=st.sampled_from(KNOWN_PAIRS),
        at=st.sampled_from([1, 1, 1, 2, 3]),
        err=st.sampled_from([errno.EIO, errno.ENOSPC]),
        partial=st.booleans(),
        cont=st.integers(0, 3),
        sticky=st.integers(0, 3),
        retries=st.integers(0, 2),
    )
    def fault_next(
        self,
        pair: tuple[str, str],
        at: int,
        err: int,
        partial: bool,
        cont: int,
        sticky: int,
        retries: int,
    ) -> None:
        """Arm a fault on the next operation of one (op, file kind) the file layer performs,
        then do the work that reaches it: every pair gets its turn."""
        sm.STATS["steps"] += 1
        op, kind = pair
        continuing = cont > 0  # the error surfaces and the process goes on, mostly
        if pair in CREATION_ONLY:  # met only while a store is created
            self._run_creation(pair, err, continuing)
            return
        if not self._prelude(op, kind):
            return
        sticky_for = sticky * 2 if err == errno.ENOSPC and sticky and continuing else None
        self.h.arm(
            op,
            at,
            err,
            partial and op == "write",
            None,
            kind=kind,
            cont=continuing,
            sticky_for=sticky_for,
            retries=retries,
        )
        sm.STATS[f"targeted:{op}:{kind}"] += 1
        self._reach(op, kind)

    def _run_creation(self, pair: tuple[str, str], err: int, cont: bool) -> None:
        assert self.h is not None
        sm.STATS[f"targeted:{pair[0]}:{pair[1]}"] += 1
        self.h.rule = "create_a_store_with_a_fault"
        self.h.create_with_fault(*pair, err, cont)

    # -- the work that reaches each (operation, file kind) -------------------------------------
    def _prelude(self, op: str, kind: str) -> bool:
        """What a pair needs before its fault is armed: a torn tail for recovery to cut, a
        subscriber to register anew, a damaged segment for ``quiver fsck --quarantine``
        to move aside. False: this store cannot meet the pair now."""
        h = self.h
        assert h is not None
        if (op, kind) == ("truncate", "wal"):
            live = [p for p in h.live_writers() if p not in h.damaged_parts]
            return bool(live) and h.tear_tail("wal", live[0])
        if (op, kind) == ("truncate", "acklog") and h.reader is not None:
            if h.registry_broken:
                return False
            if not h.tear_tail("acklog"):
                return False
            h._open_reader()  # the registry opens (and cuts) at its first exclusive use
            return True
        if kind == "sub" and op in ("open", "write", "fsync", "link", "unlink", "create"):
            # a record is created at registration: a subscriber leaves and comes back
            if h.reader is None or h.registry_broken:
                return False
            if len(h.subs) == len(SUBS):
                self._run(h.deregister, sorted(h.subs)[-1])
            return True
        damaged_segment_kinds = ("quarantine", "remote-quarantine", "readers")
        if kind in damaged_segment_kinds or (op, kind) == ("rename", "remote-arrow"):
            if h.reader is None or h.registry_broken or len(h.damage) >= 2:
                return False
            self._run(h.append_compatible_everywhere)
            h.kill_all()
            h.recover_and_check()
            # local segments are moved aside by `quiver fsck` (its own files, not this
            # process's): the pairs left are the readers' look at what was moved; a
            # live consumer skips a damaged segment and logs it (readers/*.lost.jsonl)
            return bool(h.flip("arrow", 10**6, 0.5, quarantine=kind == "quarantine"))
        return True

    def _replay_round(self) -> None:
        """Each writer flushes rows and dies before sealing them; a new one replays its
        WAL (what reads a WAL, a STATE and the decisions of pending transactions)."""
        h = self.h
        assert h is not None
        start = sum(sm.FIRED.values())
        for p in h.live_writers():
            if h.writers.get(p) is None or sum(sm.FIRED.values()) > start:
                continue
            self._run(h.append_compatible, p, 7)
            if h.writers.get(p) is not None:
                self._run(h.flush, p)
            if h.writers.get(p) is not None and not h.any_fired():
                self._run(h.restart_writer, p, False)

    def _reach(self, op: str, kind: str) -> None:
        """Rounds of the work that performs ``(op, kind)`` until its fault fired."""
        h = self.h
        assert h is not None
        fired0 = sum(sm.FIRED.values())

        def hit() -> bool:
            return sum(sm.FIRED.values()) > fired0 or h.any_fired()

        for _ in range(REACH_ROUNDS):
            if fsck_work(op, kind):
                self._run(h.fsck_with_writers_stopped)
            else:
                self._replay_round()
                if hit():
                    return
                self._burst()
                for sub in SUBS:
                    if hit():
                        break
                    if h.reader is not None and not h.registry_broken:
                        self._run(h.consume_live, sub, 2)
            if hit():
                return
            if not h.active_faults():
                return
        if not h.cont:
            sm.STATS["targeted_not_reached"] += 1

    def _burst(self) -> None:
        """One round of every kind of work, until an armed fault fired (or not)."""
        h = self.h
        assert h is not None
        start = h._fired()
        for p in sm.PARTS:
            if h.writers.get(p) is None and p not in h.damaged_parts and h.reader is not None:
                self._run(h.start_writer, p)
        for p in h.live_writers():
            if h.writers.get(p) is None:
                continue
            self._run(h.append_compatible, p, 7)
            if h.writers.get(p) is not None:
                self._run(h.flush, p)
            if h.writers.get(p) is not None:
                before = len(h.txns)
                self._run(h.begin, p, APPS[0])
                if len(h.txns) > before and h.writers.get(p) is not None:
                    self._run(h.txn_append, h.txns[-1], "base", 7)
                    if h.writers.get(p) is not None:
                        self._run(h.flush, p)
        if h.reader is not None:
            self._run(h.commit, APPS[0], h.candidates(APPS[0]))
        for p in h.live_writers():
            if h.writers.get(p) is not None:
                self._run(h.maintain, p)
            if h.writers.get(p) is not None:
                self._run(h.finalize, p)
        for sub in SUBS:
            if h.reader is not None and not h.registry_broken:
                if sub not in h.subs:
                    self._run(h.register, sub)
                self._run(h.ack, sub, 2, "ack")
        if h.reader is not None and not h.registry_broken:
            self._run(h.retention, False, False)
        if h._fired() == start and h.live_writers():
            self._run(h.restart_writer, h.live_writers()[0], False)
        if h._fired() == start and h.live_writers():
            self._run(h.restart_writer, h.live_writers()[-1], True)

    @rule(
        kind=st.sampled_from(["power", "power-meta", "power-prefix", "torn", "process"]),
        pick=st.integers(0, 1000),
    )
    def power_loss(self, kind: str, pick: int) -> None:
        sm.STATS["steps"] += 1
        self.h.power_loss(pick, kind)

    @precondition(lambda self: self.h is not None and self.h.wal_path is not None)
    @rule(data=st.data())
    def lose_wal_path(self, data: st.DataObject) -> None:
        p = self._writer(data)
        if p is not None:
            sm.STATS["steps"] += 1
            self.h.lose_wal_path(p)

    @rule(
        kind=st.sampled_from(sm.FLIP_KINDS),
        index=st.integers(0, 50),
        frac=st.floats(0, 1),
        quarantine=st.booleans(),
    )
    def flip_byte(self, kind: str, index: int, frac: float, quarantine: bool) -> None:
        if len(self.h.damage) < 2:
            self._run(self.h.flip, kind, index, frac, quarantine)

    @rule(err=st.sampled_from([errno.EIO, errno.ENOSPC]), sticky=st.integers(0, 3))
    def fault_next_and_go_on(self, err: int, sticky: int) -> None:
        # faults that surface and let the process go on are the common case in production;
        # each sequence walks the (op, kind) pairs, so every pair gets its turns
        self.fault_next(self._walk_pair(), 1, err, False, 1, sticky, 1)

    @rule(
        pair=st.sampled_from(range(len(CREATION_PAIRS))),
        err=st.sampled_from([errno.EIO, errno.ENOSPC]),
        cont=st.booleans(),
        go=st.integers(0, 2),
    )
    def create_a_store_with_a_fault(self, pair: int, err: int, cont: bool, go: int) -> None:
        if go:  # a third of the draws: creating a store is the slowest step
            return
        sm.STATS["steps"] += 1
        self.h.rule = "create_a_store_with_a_fault"
        self.h.create_with_fault(*CREATION_PAIRS[pair % len(CREATION_PAIRS)], err, cont)

    @rule(err=st.sampled_from([errno.EIO, errno.ENOSPC]))
    def fault_next_and_die(self, err: int) -> None:
        self.fault_next(self._walk_pair(), 1, err, True, 0, 0, 0)

    @invariant()
    def a_swallowed_fault_still_ends_the_process(self) -> None:
        # an injected fault the engine caught (best-effort cleanup): crash and check
        # anyway, or in continue mode go on
        if self.h is not None and self.h.any_fired():
            self.h.swallowed_fault()

    @invariant()
    def handles_work_again_once_a_fault_cleared(self) -> None:
        if self.h is not None and self.h.live_due and not self.h.active_faults():
            self.h.rule = "live_check"
            self.h.live_check()


def _per_pair() -> dict[str, str]:
    """``op:kind`` -> ``continued/crashed`` fired counts."""
    out: dict[str, list[int]] = {}
    for (op, kind, mode), n in sm.FIRED.items():
        out.setdefault(f"{op}:{kind}", [0, 0])[mode == "crashed"] += n
    return {k: f"{c}/{x}" for k, (c, x) in sorted(out.items())}


def _by_prefix(s: dict[str, int], prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: v for k, v in sorted(s.items()) if k.startswith(prefix)}


def _settings(examples: int, steps: int, **kw: object) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module", autouse=True)
def state_space_report(request: pytest.FixtureRequest):
    for c in (sm.STATS, sm.FIRED, sm.SEEN, sm.RELAXED):
        c.clear()
    sm.FAULT_POINTS.clear()
    t0 = time.monotonic()
    yield
    s = sm.STATS
    figures = {
        "sequences": s["sequences"],
        "steps": s["steps"],
        "invariant_checks": s["invariant_checks"],
        "faults_armed": s["faults_armed"],
        "faults_fired": s["faults_fired"],
        "distinct_fault_points": len(sm.FAULT_POINTS),
        "crash_states": {
            k.split(":", 1)[1]: v for k, v in s.items() if k.startswith("crash_state:")
        },
        "flips": {k.split(":", 1)[1]: v for k, v in s.items() if k.startswith("flips:")},
        "wal_path_losses": s["wal_path_losses"],
        "kills": s["kills"],
        "wall_s": round(time.monotonic() - t0, 1),
        "faults_continued": s["faults_continued"],
        "faults_crashed": s["faults_crashed"],
        "fired_per_op_kind": _per_pair(),
        "pairs_known": len(KNOWN_PAIRS),
        "pairs_fired": len({(o, k) for o, k, _ in sm.FIRED}),
        "pairs_never_fired": sorted(
            f"{o}:{k}" for o, k in set(KNOWN_PAIRS) - {(o, k) for o, k, _ in sm.FIRED}
        ),
        "pairs_seen_not_known": sorted(f"{o}:{k}" for o, k in set(sm.SEEN) - set(KNOWN_PAIRS)),
        "live_checks": _by_prefix(s, "live_checks:"),
        "reopen_checks": _by_prefix(s, "reopen_checks:"),
        "relaxations_used": dict(sm.RELAXED),
        "targeted": _by_prefix(s, "targeted:"),
        "rules": _by_prefix(s, "rule:"),
        "other": {k: v for k, v in sorted(s.items()) if ":" not in k},
    }
    line = "state space: " + json.dumps(figures, sort_keys=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(line)
    out = os.environ.get("QUIVER_STATE_SPACE_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(
                {
                    **figures,
                    "fault_points": sorted(map(list, sm.FAULT_POINTS)),
                    "seen": {f"{o}:{k}": n for (o, k), n in sorted(sm.SEEN.items())},
                },
                f,
                indent=1,
            )


def local_segments_only(pair: tuple[str, str]) -> bool:
    """Pairs of segments in the store directory (a remote location has none): their
    files, and the existence checks of the local catalog's partition listing."""
    return pair[1] in ("arrow", "meta", "quarantine") or pair == ("stat", "dir")


def _walk_options(i: int, pair: tuple[str, str]) -> Options:
    """Store options for the ``i``-th step of the walk: the remote location where the
    pair needs it (and for a third of the others), every policy and layout in turn."""
    kind = pair[1]
    remote = kind.startswith("remote-") or (not local_segments_only(pair) and i % 3 == 2)
    return Options(
        flush=("group", "sync")[i % 2],
        layout=("default", "external")[(i // 2) % 2],
        policy=(None, "backpressure", "drop_oldest")[i % 3],
        time_retention=i % 4 == 3,
        segments="remote" if remote else "local",
    )


def _warm_up(m: StoreStateSpace) -> None:
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


def walk_every_pair(only: set[str] | None = None, shapes: int = 1) -> dict[str, list[str]]:
    """The deterministic walk: for every known pair, in both halves (the error surfaces
    and the process goes on; the process dies), a store with history, a fault armed on
    the pair's next operation and the work that reaches it, then every check. Returns
    the pairs whose fault never fired, per half (``only``: these ``op:kind`` alone;
    ``shapes``: that many store shapes, errnos and torn writes per pair and half)."""
    missed: dict[str, list[str]] = {"continued": [], "crashed": []}
    for i, pair in enumerate(KNOWN_PAIRS):
        if only is not None and ":".join(pair) not in only:
            continue
        for cont, shape in ((c, s) for s in range(shapes) for c in (1, 0)):
            mode = "continued" if cont else "crashed"
            before = sm.FIRED[(*pair, mode)]
            j = i + cont + 5 * shape
            m = StoreStateSpace()
            try:
                m.start(*dataclasses.astuple(_walk_options(j, pair)), first_pair=0)
                _warm_up(m)
                m.fault_next(pair, 1, (errno.EIO, errno.ENOSPC)[j % 2], j % 4 == 1, cont, 0, 1)
                m.a_swallowed_fault_still_ends_the_process()
                m.handles_work_again_once_a_fault_cleared()
                assert m.h is not None
                m.h.rule = "walk"
                m.h.kill_all()
                m.h.recover_and_check()
            finally:
                m.teardown()
            sm.STATS["walk_steps"] += 1
            if sm.FIRED[(*pair, mode)] == before:
                missed[mode].append(":".join(pair))
    return missed


def _make_kind(m: StoreStateSpace, kind: str) -> None:
    """Bring about a file of ``kind`` that a store with history may lack."""
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
    elif kind == "checkpoint":
        for _ in range(6):
            if h.damage_files()["checkpoint"]:
                break
            h.append_compatible_everywhere()
            for sub in SUBS:
                h.consume_live(sub, 2)


def walk_every_flip() -> list[str]:
    """A byte flipped in one file of every kind of ARCHITECTURE.md §11 (segments and
    the quarantine mark also on the remote location, the readers' lost log by name),
    then every check. Returns the kinds no file could be found for."""
    missed = []
    for i, kind in enumerate(sm.FLIP_KINDS):
        remotes = (False, True) if kind in ("arrow", "meta", "quarantine") else (False,)
        for remote in remotes:
            m = StoreStateSpace()
            try:
                opts = _walk_options(i, ("flip", kind))
                opts.segments = "remote" if remote else "local"
                m.start(*dataclasses.astuple(opts), first_pair=0)
                _warm_up(m)
                _make_kind(m, kind)
                h = m.h
                assert h is not None
                h.rule = "flip"
                files = h.damage_files()[kind]
                lost = [j for j, f in enumerate(files) if f.endswith(".lost.jsonl")]
                index = lost[0] if lost else i
                if not h.flip(kind, index, 0.5, quarantine=i % 2 == 0):
                    missed.append(kind + (" (remote)" if remote else ""))
                elif lost:
                    sm.STATS["flips:readers-lost-log"] += 1
                h.rule = "walk"
                h.kill_all()
                h.recover_and_check()
            finally:
                m.teardown()
    return missed


def test_every_file_kind_is_flipped_in_the_walk():
    """Damage to one file of every kind is contained: the store opens (or refuses the
    damaged partition naming the file) and everything undamaged reads and writes."""
    assert walk_every_flip() == []


def test_every_known_pair_fires_in_the_walk():
    """Each (operation, file kind) the workload performs has its fault fire, once with
    the process going on and once with it dying, and every invariant holds after it."""
    missed = walk_every_pair()
    assert missed == {"continued": [], "crashed": []}, missed


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_every_known_pair_fires_in_every_store_shape_soak():
    """The walk over six store shapes per pair and half (layouts, policies, flush
    modes, local and remote segments, EIO and ENOSPC, torn writes)."""
    missed = walk_every_pair(shapes=6)
    assert missed == {"continued": [], "crashed": []}, missed


def test_state_space_ci_profile():
    """The short profile: deterministic sequences, no example database."""
    run = StoreStateSpace.TestCase("runTest")
    run.settings = _settings(
        int(os.environ.get("QUIVER_STATE_SPACE_EXAMPLES", "200")),
        int(os.environ.get("QUIVER_STATE_SPACE_STEPS", "40")),
        database=None,
        derandomize=True,
        # shrinking many distinct failures takes minutes: CI reports them raw (the shrunk
        # ones are the regression tests); QUIVER_STATE_SPACE_SHRINK=1 shrinks
        phases=list(Phase) if os.environ.get("QUIVER_STATE_SPACE_SHRINK") else [Phase.generate],
    )
    run.runTest()


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_state_space_soak_profile():
    """The long profile (``make soak``): random sequences, failures saved in a tmp database."""
    db = os.environ.get("QUIVER_STATE_SPACE_DB") or os.path.join(
        tempfile.gettempdir(), "quiver-state-space-db"
    )
    run = StoreStateSpace.TestCase("runTest")
    run.settings = _settings(
        int(os.environ.get("QUIVER_STATE_SPACE_EXAMPLES", "400")),
        int(os.environ.get("QUIVER_STATE_SPACE_STEPS", "80")),
        database=DirectoryBasedExampleDatabase(db),
    )
    run.runTest()
