"""The state machine of the generative state-space tests: one machine, parametrized by
the kind of root it drives (``test_state_space.py``: a POSIX root;
``test_state_space_objects.py``: an object root; the model and its invariants:
``tests/engine/state_model.py``).

A :class:`Root` says what its kind of root is made of (its harness, the shapes a store
is drawn in, the (operation, kind) pairs its faults walk, the kinds of file or object a
byte is flipped in) and which :data:`CAPABILITIES` it has. :class:`StateSpace` holds
every rule and invariant; a rule that needs a capability says so (:func:`needs`), and
the machine of a root (:class:`StoreStateSpace`, :class:`ObjectStateSpace`) leaves out
the rules whose capability its root lacks. What every root has, every machine draws:
writes, transactions and their decisions, subscribers, retention, kills, reopens, power
loss, flipped bytes.

A POSIX root has faults of its file layer (EIO/ENOSPC on the next operation of one
(operation, file kind), torn writes, a store created with one) and a ``wal.path`` that
can be lost alone. An object root has faults of its requests (failed, 409, lost
response, stale listing), machines lost with their disk (staged transactions sealed by
whoever comes next), lease holders cut off from the storage or suspended mid-request
(``late_holders.py``) and machines whose wall clocks are hours off. The rules with a
root's own draws, the store's shape (:meth:`StateSpace.start`) and the flipped kinds
(:meth:`StateSpace.flip_byte`), draw what the root says.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.engine import late_holders as lh
from tests.engine import state_model as sm
from tests.engine.state_model import (
    APPS,
    ROW_SIZES,
    SUBS,
    Crashed,
    Faulted,
    ObjectStoreHarness,
    Options,
    StoreHarness,
)
from tests.scratch import SCRATCH

# -- capabilities: what a kind of root lets the machine do -----------------------------------
FILE_FAULTS = "file faults"  # EIO/ENOSPC on an operation of the file layer (maybe torn)
LOST_WAL_PATH = "lost wal.path"  # wal.path lost alone, the store's directory left
OBJECT_FAULTS = "object faults"  # a request fails, meets a 409, loses its answer, lists stale
STAGED_TXNS = "staged transactions"  # a flushed transaction is staged before it is reported
LOST_MACHINES = "lost machines"  # a writer's machine lost with its disk, its lease left held
LATE_HOLDERS = "late holders"  # a holder's requests held while a successor takes over
SUSPENDS = "suspends"  # a holder's machine sleeps mid-request past its lease ttl
CLOCK_SKEW = "clock skew"  # consumers and retention on machines hours ahead or behind
CAPABILITIES = (
    FILE_FAULTS, LOST_WAL_PATH, OBJECT_FAULTS, STAGED_TXNS, LOST_MACHINES, LATE_HOLDERS,
    SUSPENDS, CLOCK_SKEW,
)  # fmt: skip


def needs(*capabilities: str) -> Callable[[Any], Any]:
    """Marks a rule as one only a root with every one of ``capabilities`` draws (put it
    above ``@rule``)."""
    assert set(capabilities) <= set(CAPABILITIES), capabilities

    def mark(f: Any) -> Any:
        f.capabilities_needed = frozenset(capabilities)
        return f

    return mark


# -- the POSIX root: (operation, file kind) pairs of the file layer --------------------------
POSIX_PAIRS: list[tuple[str, str]] = [
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

OPS = ["write", "fsync", "rename", "unlink", "open", "fsync_dir", "truncate", "chmod", "mkdir"]
WHERE = [None, "/wal/", "/segments/", "/subscribers/", "/commits/", "STATE"]

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


def fsck_work(op: str, kind: str) -> bool:
    """Pairs only ``quiver fsck --quarantine`` meets: moving a remote segment aside."""
    return (kind == "remote-quarantine" and op != "read") or (op, kind) == (
        "rename",
        "remote-arrow",
    )


def local_segments_only(pair: tuple[str, str]) -> bool:
    """Pairs of segments in the store directory (a remote location has none): their
    files, and the existence checks of the local catalog's partition listing."""
    return pair[1] in ("arrow", "meta", "quarantine") or pair == ("stat", "dir")


def posix_walk_options(i: int, pair: tuple[str, str] | None = None) -> Options:
    """Store options for the ``i``-th step of a walk: the remote location where the
    pair needs it (and for a third of the others), every policy and layout in turn."""
    remote = pair is not None and (
        pair[1].startswith("remote-") or (not local_segments_only(pair) and i % 3 == 2)
    )
    return Options(
        flush=("group", "sync")[i % 2],
        layout=("default", "external")[(i // 2) % 2],
        policy=(None, "backpressure", "drop_oldest")[i % 3],
        time_retention=i % 4 == 3,
        segments="remote" if remote else "local",
    )


# -- the object root: (request, object kind) pairs ---------------------------------------------
OBJECT_WRITES = ("create", "replace", "put", "delete")

OBJECT_PAIRS: list[tuple[str, str]] = [
    tuple(pair.split(":"))  # type: ignore[misc]
    for pair in """
    create:acklog create:arrow create:commit create:meta create:readers-lease create:sub
    delete:arrow delete:meta
    get:acklog get:checkpoint get:commit get:lease get:manifest get:meta get:policy
    get:readers-lease get:store get:sub get:metrics
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
Staging (§10.2): a flushed transaction's object is created, listed by its writer's
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
    if op in OBJECT_WRITES:
        return ("fail", "conflict", "lost")
    return ("fail", "lost")


def object_walk_options(i: int, pair: tuple[str, str] | None = None) -> Options:
    """Store options for the ``i``-th step of a walk on an object root (the WAL in
    ``wal.path``, every other object in the bucket)."""
    return Options(
        flush=("group", "sync")[i % 2],
        layout="external",
        policy=(None, "backpressure", "drop_oldest")[i % 3],
        time_retention=i % 4 == 3,
    )


# -- roots -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Root:
    """A kind of root, as the state machine sees it."""

    name: str
    harness: type[StoreHarness]
    capabilities: frozenset[str]
    pairs: list[tuple[str, str]]
    """The pairs its targeted faults walk (a sequence starts at a drawn one)."""
    shape: dict[str, st.SearchStrategy[Any]]
    """The options a store is drawn with (:meth:`StateSpace.start`)."""
    fixed: dict[str, Any]
    """Options every store of the root has."""
    flip_kinds: tuple[str, ...]
    walk_options: Callable[[int, tuple[str, str] | None], Options]
    """The options of the ``i``-th store of a deterministic walk (for a pair)."""
    flip_draws: dict[str, st.SearchStrategy[Any]] = field(default_factory=dict)
    """What :meth:`StateSpace.flip_byte` draws besides the kind, index and place."""
    never_flipped_in_sequences: tuple[str, ...] = ()
    """Kinds only the deterministic flip walk damages."""

    def options(self, **shape: Any) -> Options:
        return Options(**{**shape, **self.fixed})


POSIX = Root(
    name="POSIX",
    harness=StoreHarness,
    capabilities=frozenset({FILE_FAULTS, LOST_WAL_PATH}),
    pairs=POSIX_PAIRS,
    shape={
        "flush": st.sampled_from(["group", "sync"]),
        "layout": st.sampled_from(["default", "external"]),
        "policy": st.sampled_from([None, "backpressure", "drop_oldest"]),
        "time_retention": st.booleans(),
        "segments": st.sampled_from(["local", "local", "remote"]),
    },
    fixed={},
    flip_kinds=sm.FLIP_KINDS,
    flip_draws={"quarantine": st.booleans()},
    walk_options=posix_walk_options,
)

OBJECTS = Root(
    name="object",
    harness=ObjectStoreHarness,
    capabilities=frozenset(
        {OBJECT_FAULTS, STAGED_TXNS, LOST_MACHINES, LATE_HOLDERS, SUSPENDS, CLOCK_SKEW}
    ),
    pairs=OBJECT_PAIRS,
    shape={
        "flush": st.sampled_from(["group", "sync"]),
        "policy": st.sampled_from([None, "backpressure", "drop_oldest"]),
        "time_retention": st.booleans(),
    },
    # the WAL on local disk (wal.path), every other object in the bucket
    fixed={"layout": "external", "segments": "local"},
    flip_kinds=sm.OBJECT_FLIP_KINDS,
    never_flipped_in_sequences=("store", "lease"),
    walk_options=object_walk_options,
)

SIZES = st.sampled_from(sorted(ROW_SIZES.values()))
VARIANT = st.sampled_from(
    ["base"] * 6 + ["nullable", "nullable", "meta", "dict", "newcol", "badtype"]
)

REACH_ROUNDS = 3
"""Rounds of work a targeted fault gets to fire in."""


class StateSpace(RuleBasedStateMachine):
    """Drives the root's harness; a rule's injected fault ends in a crash + check, or
    surfaces and the process goes on. Runs only as a root's machine (a subclass naming
    its root: ``class M(StateSpace, root=POSIX)``)."""

    root: ClassVar[Root]

    def __init_subclass__(cls, root: Root | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if root is None:
            return
        cls.root = root
        # the rules whose draws are the root's own
        cls.start = initialize(  # type: ignore[method-assign]
            **root.shape,
            # an index drawn like an element: integers over a wide range favour boundary
            # values (0, powers of two), which left most pairs without a turn
            first_pair=st.sampled_from(range(len(root.pairs))),
        )(StateSpace.start)
        cls.flip_byte = rule(  # type: ignore[method-assign]
            kind=st.sampled_from(root.flip_kinds),
            index=st.integers(0, 50),
            frac=st.floats(0, 1),
            **root.flip_draws,
        )(StateSpace.flip_byte)
        # the rules this root cannot draw are left out
        for name, member in vars(StateSpace).items():
            missing = getattr(member, "capabilities_needed", frozenset()) - root.capabilities
            if missing:
                setattr(cls, name, _not_a_rule_on(root, name, missing))

    def __init__(self) -> None:
        super().__init__()
        self.h: Any = None  # the root's harness (StoreHarness or ObjectStoreHarness)
        self.tmp = tempfile.mkdtemp(prefix="qstate-", dir=SCRATCH)
        self._scenarios: lh.Scenarios | None = None
        self.next_pair = 0
        self.next_held = 0

    def teardown(self) -> None:
        try:
            if self.h is not None:
                self.h.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            if self._scenarios is not None:
                self._scenarios.close()

    def start(self, first_pair: int = 0, **shape: Any) -> None:
        """A store of the drawn shape (the initialize rule: its draws are the root's)."""
        self.open_root(self.root.options(**shape), first_pair)

    def open_root(self, opts: Options, first_pair: int = 0) -> None:
        self.h = self.root.harness(self.tmp, opts)
        self.next_pair = first_pair  # targeted faults walk the pairs from here
        self.next_held = first_pair  # held (request kind, role) pairs are walked from here

    def scenarios(self) -> lh.Scenarios:
        assert isinstance(self.h, ObjectStoreHarness)
        if self._scenarios is None:
            self._scenarios = lh.Scenarios(self.h)
        return self._scenarios

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
        self._task(p, app, variant, n)

    def _task(self, p: str, app: str, variant: str, n: int) -> None:
        """Begin a transaction on ``p``, append to it and flush (on an object root the
        flush stages it)."""
        h = self.h
        before = len(h.txns)
        self._run(h.begin, p, app)
        if len(h.txns) > before and h.writers.get(p) is not None:
            self._run(h.txn_append, h.txns[-1], variant, n)
            if h.writers.get(p) is not None:
                self._run(h.flush, p)

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

    @rule(
        sub=st.sampled_from(SUBS),
        order=st.sampled_from(["newest", "newest", "oldest"]),
        share=st.sampled_from([None, 0.25, 0.75, 1.0]),
        cap=st.integers(1, 3),
        batches=st.integers(1, 4),
    )
    def catch_up(self, sub: str, order: str, share: float | None, cap: int, batches: int) -> None:
        """A live consumer reading in a catch-up order (ARCHITECTURE.md §19): newest first,
        its head takes new segments and its backfill walks the backlog down, a few
        segments a batch; the order drawn each time, so a backlog left newest first
        is drained oldest first, or newest first again after an oldest-first run."""
        if sub not in self.h.subs:
            self._run(self.h.register, sub)
        given = share if order == "newest" else None  # a share is refused oldest first
        self._run(self.h.consume_live, sub, batches, order, given, cap)

    @rule(expire=st.integers(0, 4), via_gc=st.booleans())
    def retention(self, expire: int, via_gc: bool) -> None:
        if self.h.reader is not None and not self.h.registry_broken:
            self._run(self.h.retention, expire == 0, via_gc)

    # -- crashes, lost directories and machines, damage ----------------------------------------
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
        kind=st.sampled_from(["power", "power-meta", "power-prefix", "torn", "process"]),
        pick=st.integers(0, 1000),
    )
    def power_loss(self, kind: str, pick: int) -> None:
        sm.STATS["steps"] += 1
        self.h.power_loss(pick, kind)

    def flip_byte(self, kind: str, index: int, frac: float, quarantine: bool = False) -> None:
        """A byte flipped in a file (or object) of ``kind`` (a rule whose draws are the
        root's: see ``__init_subclass__``)."""
        assert self.h is not None
        if len(self.h.damage) < 2 and kind not in self.root.never_flipped_in_sequences:
            self._run(self.h.flip, kind, index, frac, quarantine)

    @needs(LOST_WAL_PATH)
    @precondition(lambda self: self.h is not None and self.h.wal_path is not None)
    @rule(data=st.data())
    def lose_wal_path(self, data: st.DataObject) -> None:
        p = self._writer(data)
        if p is not None:
            sm.STATS["steps"] += 1
            self.h.lose_wal_path(p)

    @needs(LOST_MACHINES, STAGED_TXNS)
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
        if task:  # (the size is drawn only once the transaction began)
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

    # -- faults of the file layer -------------------------------------------------------------
    def _walk_pair(self) -> tuple[str, str]:
        """The next pair this store can meet (segments are either local or remote)."""
        assert self.h is not None
        pairs = self.root.pairs
        remote = self.h.opts.segments == "remote"
        for _ in range(len(pairs)):
            pair = pairs[self.next_pair % len(pairs)]
            self.next_pair += 1
            if remote and local_segments_only(pair):
                continue  # no .arrow/.meta in the store directory
            if pair[1].startswith("remote-") and not remote:
                continue
            return pair
        return pair

    @needs(FILE_FAULTS)
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

    @needs(FILE_FAULTS)
    @rule(
        pair=st.sampled_from(POSIX_PAIRS),
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

    @needs(FILE_FAULTS)
    @rule(err=st.sampled_from([errno.EIO, errno.ENOSPC]), sticky=st.integers(0, 3))
    def fault_next_and_go_on(self, err: int, sticky: int) -> None:
        # faults that surface and let the process go on are the common case in production;
        # each sequence walks the (op, kind) pairs, so every pair gets its turns
        self.fault_next(self._walk_pair(), 1, err, False, 1, sticky, 1)

    @needs(FILE_FAULTS)
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

    @needs(FILE_FAULTS)
    @rule(err=st.sampled_from([errno.EIO, errno.ENOSPC]))
    def fault_next_and_die(self, err: int) -> None:
        self.fault_next(self._walk_pair(), 1, err, True, 0, 0, 0)

    # -- faults of object requests ------------------------------------------------------------
    @needs(OBJECT_FAULTS)
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

    @needs(OBJECT_FAULTS)
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
            # met only by the rewrite of a damaged MANIFEST (§11.1): one is damaged now,
            # and the next writer open rewrites it
            files = h.damage_files()["manifest"]
            if files:
                h._flip(files[0], h._size(files[0]) // 2)
                h.manifest_damaged.add(files[0].split("/")[-2])
        self._reach(op, kind)

    # -- the work that reaches each pair -------------------------------------------------------
    def _prelude(self, op: str, kind: str) -> bool:
        """What a pair needs before its fault is armed: a torn tail for recovery to cut, a
        subscriber to register anew, a damaged segment for ``quiver fsck --quarantine``
        to move aside (or a live consumer to skip). False: this store cannot meet the pair
        now."""
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

    def _reach(self, op: str, kind: str) -> None:
        """Rounds of the work that performs ``(op, kind)`` until its fault fired. Some
        pairs of an object root need their own step first: a staged object is read only
        for a lost machine (a committed transaction is staged and its machine lost, the
        finishers taken in turn); a CHECKPOINT is created only once; a ``.sub`` record and
        a consumer's lease are created only for a name never registered before (a new
        subscriber starts, and is removed again so that it pins nothing)."""
        h = self.h
        assert h is not None
        if self._object_step(op, kind):
            return
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

    def _object_step(self, op: str, kind: str) -> bool:
        """The step of :meth:`_reach` a pair of an object root needs first. True: its
        fault fired (or cleared) already."""
        h = self.h
        if (op, kind) == ("get", "staged") and LOST_MACHINES in self.root.capabilities:
            live = [p for p in h.live_writers() if p not in h.damaged_parts]
            if live and h.reader is not None:
                self.commit_a_staged_txn(live[-1])
                if h.writers.get(live[-1]) is not None and not h.any_fired():
                    observer = self.next_pair % 2 == 0
                    self._run(h.lose_machine, live[-1], observer)
                if h.any_fired() or not h.active_faults():
                    return True
        if (op, kind) == ("create", "checkpoint") and OBJECT_FAULTS in self.root.capabilities:
            # a store makes its CHECKPOINT once; later ones replace it. The warm-up may
            # have made it already: it goes, and the next one is a create again (no
            # delta was deleted yet: deletion waits the horizon, §13.7, so nothing is lost)
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
                return True
        return False

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
                self._task(p, APPS[0], "base", 7)
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

    def commit_a_staged_txn(self, p: str) -> None:
        """A task writes a transaction to ``p`` (staged after its flush); the driver
        commits its batch."""
        h = self.h
        assert h is not None
        self._task(p, APPS[1], "base", 7)
        if h.reader is not None and not h.any_fired():
            self._run(h.commit, APPS[1], h.candidates(APPS[1]))

    # -- holders cut off from the storage, suspended machines, skewed wall clocks ------------
    @needs(LATE_HOLDERS)
    @rule(phase=st.sampled_from(["before", "before", "after"]), choice=st.integers(0, 7))
    def partition_a_holder(self, phase: str, choice: int) -> None:
        """A lease holder's next request of one kind (and every later one) is held while
        a successor takes its lease over and works; then they go out late (each
        sequence walks the (request kind, role) pairs)."""
        self._hold_next(phase, False, choice)

    @needs(LATE_HOLDERS, SUSPENDS)
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

    @needs(CLOCK_SKEW)
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

    # -- invariants -----------------------------------------------------------------------------
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


def _not_a_rule_on(root: Root, name: str, missing: frozenset[str]) -> Callable[..., None]:
    def absent(self: StateSpace, *args: Any, **kw: Any) -> None:
        raise AssertionError(f"{name} is not a rule on a {root.name} root (no {sorted(missing)})")

    absent.__name__ = name
    return absent


class StoreStateSpace(StateSpace, root=POSIX):
    """The machine on a POSIX root (faults of the file layer, a lost ``wal.path``)."""


class ObjectStateSpace(StateSpace, root=OBJECTS):
    """The machine on a ``memory://`` root (faults of object requests, lost machines and
    staged transactions, late and suspended holders, skewed wall clocks)."""
