"""Lease holders of an object root cut off from the storage while others go on,
machines suspended in the middle of a request, machines whose wall clocks are hours
off: the rules the state machine (``state_space_machine.py``) draws on an object root
(``test_state_space_objects.py``) that check fencing by the storage (ARCHITECTURE.md
§8.2-§10.2) on :class:`~tests.engine.state_model.ObjectStoreHarness`.

**Machines.** The harness is one process of one machine (:attr:`World.home`). A
scenario adds others, each a :class:`Machine` with its own host identity, its own
tables of what its process holds and has watched (``lease._held``, ``lease._seen``,
the live consumers of ``subscribers/live.py``), its own local disk (``wal.path``), its
own CLOCK_BOOTTIME and its own wall clock. They all run in this process: while a
:class:`World` is installed those tables, ``time.time``, ``time.time_ns`` and
``time.clock_gettime(CLOCK_BOOTTIME)`` answer for the machine of the calling thread
(a lease keeper belongs to the machine that started it). The monotonic clock is
never moved, so an interval measured on it does not see a suspend.

**Holding.** A holder's requests go through its own ``MemoryObjects`` (one per store
handle). :class:`Hold` replaces that handle's hooks: from the first request of the
chosen kind on (``before``: held before it is made; ``after``: it landed and its
answer is held), every request of the holder's threads waits until released. The
holder's call runs in a thread of its own; meanwhile a successor on another machine,
having watched the holder's lease unchanged for its ttl, takes it over and works;
then the held requests go out, late, in order. A *suspend* is a hold during which the
holder's machine's boot-time clock jumps by :data:`SUSPEND_S` (more than the lease ttl
and half the ack-log horizon), inside the hook; then it resumes.

**Roles** (:data:`ROLE_REQUESTS`): a partition writer; an observer sealing for a lost
machine (``finalize_idle_partitions``); a live consumer (``Subscription``); a retention
pass (``run_retention`` or ``quiver gc``'s ``run_gc``); the driver's ``commit_txn``.
What a late holder must come to, besides every invariant of the model holding after
it: a writer whose publication went out after its lease moved is refused
(``LeaseLostError``/``FencedError``) and so is every later publication of that handle
(:class:`ZombiePublished`); a staged object created after the lease moved is never
reported; a live consumer's acknowledgement written after a later consumer's claim is
refused (:class:`LateAckRecorded`); of two drivers deciding one batch exactly one
decision stands (:class:`TwoDecisions`); a sealer's late publication is refused (the
model's duplicate check says so otherwise); a late retention pass deletes nothing a
subscriber still needs (the model's check).

**Skewed wall clocks.** With subscriber expiry in the store's policy (an hour, which
the storage's clock never reaches in a sequence), consumers and retention passes on
machines hours ahead or behind must expire nobody (:class:`~tests.engine.state_model.
ExpiredWhileActive`).

Figures for the report: :data:`HELD` (holds that fired per request kind, role and
partitioned/suspended), :data:`LATE` (requests delivered late), :data:`OUTCOMES`,
:data:`SKEWS`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease_keeper import LeaseKeeper
from quiver_spark.errors import LeaseHeldError, LeaseLostError, QuiverError
from quiver_spark.objects.memory import Faults
from quiver_spark.subscribers import live as live_mod
from quiver_spark.subscribers.objects_journal import HORIZON_S
from quiver_spark.subscription import Subscription
from tests.engine import state_model as sm
from tests.engine.state_model import (
    APPS,
    COMMITTED,
    DISCARDED,
    PENDING,
    TXN,
    VARIANTS,
    ObjectStoreHarness,
    StoreHarness,
    Txn,
    Violation,
    WrongError,
    _schema,
    compatible,
    make_batch,
    object_kind,
)

ROLE_REQUESTS: dict[str, tuple[str, ...]] = {
    "writer": (
        "create:arrow", "create:meta", "replace:manifest", "create:staged", "get:lease",
        "delete:staged", "replace:lease", "list:segments",
    ),
    "sealer": (
        "replace:lease", "replace:manifest", "get:staged", "create:arrow", "create:meta",
        "delete:staged",
    ),
    "consumer": (
        "create:acklog", "list:acklog", "replace:readers-lease", "get:arrow", "replace:sub",
    ),
    "retention": ("replace:manifest", "delete:meta", "delete:arrow", "create:acklog"),
    "driver": ("create:commit",),
}  # fmt: skip
"""The requests each role makes that a hold is put on (the first of its kind in the
role's call: a sealer's first ``replace:lease`` takes the lease over, its first
``replace:manifest`` claims its epoch; a writer's ``replace:lease`` is its keeper's
renewal, its ``list:segments`` the listing of its recovery as its process starts
again; a consumer's ``replace:sub`` is the note of its record after an acknowledgement)."""

HELD_PAIRS: list[tuple[str, str]] = [(r, role) for role, rs in ROLE_REQUESTS.items() for r in rs]
"""Every (request kind, role) a hold is put on."""

MODES = ("partitioned", "suspended")

SUSPEND_S = max(lease_mod.DEFAULT_TTL_S, HORIZON_S / 2) + 1.0
"""How far a suspended machine's boot-time clock jumps in the middle of a request."""

HOLD_TIMEOUT_S = 30.0
"""The longest a held request waits for its release (a stuck scenario fails then)."""

SKEW_HOURS = (2, 9, 30)

HELD: Counter[tuple[str, str, str]] = Counter()
"""Holds that fired per (request kind, role, partitioned|suspended)."""

LATE: Counter[tuple[str, str]] = Counter()
"""Requests a holder sent after its hold point, per (request kind, role)."""

OUTCOMES: Counter[tuple[str, str]] = Counter()
"""What each held holder came to, per (role, outcome)."""

SKEWS: Counter[tuple[str, str]] = Counter()
"""Steps with a skewed wall clock per (role, ahead|behind)."""


# -- violations ----------------------------------------------------------------------------
class ZombiePublished(Violation):
    """A writer or sealer whose lease moved published (or reported staged) after it."""


class LateAckRecorded(Violation):
    """A live consumer's acknowledgement written after a later consumer's claim was
    recorded (the successor read its position before it: rows skipped)."""


class TwoDecisions(Violation):
    """Two drivers deciding one batch both won, or both lost."""


class PublishedObjectRemoved(Violation):
    """A segment its partition's MANIFEST lists lost its ``.arrow`` or ``.meta`` (a late
    holder removed an object it did not publish)."""


class StuckHolder(Violation):
    """A held holder did not finish once released (a hang, or a lock held across)."""


# -- machines --------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class Machine:
    """One machine of the world (see the module docstring)."""

    name: str
    ident: Any = None  # lease._Identity; None: this process's own
    suspended_s: float = 0.0  # added to its CLOCK_BOOTTIME
    skew_ns: int = 0  # added to its wall clock
    wal: str | None = None  # its local disk (wal.path)
    held: dict[Any, Any] = dataclasses.field(default_factory=dict)
    seen: dict[Any, Any] = dataclasses.field(default_factory=dict)
    acquiring: dict[Any, Any] = dataclasses.field(default_factory=dict)
    live: dict[Any, Any] = dataclasses.field(default_factory=dict)


class _PerMachine(MutableMapping[Any, Any]):
    """A module table that is the calling thread's machine's."""

    def __init__(self, world: World, attr: str) -> None:
        self.world = world
        self.attr = attr

    def _d(self) -> dict[Any, Any]:
        d: dict[Any, Any] = getattr(self.world.current(), self.attr)
        return d

    def __getitem__(self, k: Any) -> Any:
        return self._d()[k]

    def __setitem__(self, k: Any, v: Any) -> None:
        self._d()[k] = v

    def __delitem__(self, k: Any) -> None:
        del self._d()[k]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._d()))

    def __len__(self) -> int:
        return len(self._d())


class World:
    """The machines of one sequence (see the module docstring); installed on first use
    and uninstalled at the sequence's end."""

    def __init__(self, h: ObjectStoreHarness) -> None:
        self.h = h
        self.home = Machine("home", wal=h.wal_path)
        self.count = 0
        self.installed = False
        self._tls = threading.local()
        self._threads: weakref.WeakKeyDictionary[threading.Thread, Machine] = (
            weakref.WeakKeyDictionary()
        )
        self._saved: dict[str, Any] = {}

    # -- installation -------------------------------------------------------------------
    def current(self) -> Machine:
        m: Machine | None = getattr(self._tls, "machine", None)
        if m is not None:
            return m
        return self._threads.get(threading.current_thread(), self.home)

    def install(self) -> None:
        if self.installed:
            return
        saved = self._saved
        saved.update(
            held=lease_mod._held,
            seen=lease_mod._seen,
            acquiring=lease_mod._acquiring,
            live=live_mod._live,
            me=lease_mod._me,
            keep=LeaseKeeper.start,
            time=time.time,
            time_ns=time.time_ns,
            gettime=time.clock_gettime,
        )
        self.home.held, self.home.seen = saved["held"], saved["seen"]
        self.home.acquiring, self.home.live = saved["acquiring"], saved["live"]
        lease_mod._held = _PerMachine(self, "held")  # type: ignore[assignment]
        lease_mod._seen = _PerMachine(self, "seen")  # type: ignore[assignment]
        lease_mod._acquiring = _PerMachine(self, "acquiring")  # type: ignore[assignment]
        live_mod._live = _PerMachine(self, "live")  # type: ignore[assignment]
        own_me, keep = saved["me"], saved["keep"]
        real_time, real_ns, real_get = saved["time"], saved["time_ns"], saved["gettime"]
        boottime = getattr(time, "CLOCK_BOOTTIME", None)

        def me() -> Any:
            ident = self.current().ident
            return ident if ident is not None else own_me()

        def start(keeper: Any) -> None:
            self._threads[keeper._thread] = self.current()
            keep(keeper)

        def clock_gettime(clk: int) -> float:
            t: float = real_get(clk)
            return t + self.current().suspended_s if clk == boottime else t

        lease_mod._me = me
        LeaseKeeper.start = start  # type: ignore[method-assign,assignment]
        time.time = lambda: real_time() + self.current().skew_ns / 1e9
        time.time_ns = lambda: real_ns() + self.current().skew_ns
        time.clock_gettime = clock_gettime
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        s = self._saved
        lease_mod._held, lease_mod._seen = s["held"], s["seen"]
        lease_mod._acquiring, live_mod._live = s["acquiring"], s["live"]
        lease_mod._me = s["me"]
        LeaseKeeper.start = s["keep"]  # type: ignore[method-assign]
        time.time, time.time_ns, time.clock_gettime = s["time"], s["time_ns"], s["gettime"]
        self.installed = False

    # -- machines and their handles --------------------------------------------------------
    def machine(self, role: str) -> Machine:
        """A new machine (its own host, disk and process tables)."""
        self.install()
        self.count += 1
        name = f"{role}-{self.count}"
        ident = lease_mod._Identity(f"host-{name}", 60000 + self.count, 1, f"node-{name}")
        wal = os.path.join(self.h.base, "machines", name)
        return Machine(name, ident, wal=wal)

    @contextmanager
    def on(self, m: Machine) -> Iterator[None]:
        """The calling thread acts as machine ``m``."""
        before = getattr(self._tls, "machine", None)
        self._tls.machine = m
        try:
            yield
        finally:
            self._tls.machine = before

    def open(self, m: Machine, partition: str | None) -> QuiverStore:
        """A store handle of ``m`` (its requests never fault: only holds apply)."""
        h = self.h
        cfg = dataclasses.replace(h.cfg, wal=dataclasses.replace(h.cfg.wal, path=m.wal))
        with self.on(m):
            return QuiverStore.open(h.root, cfg, partition=partition, background=False)

    def close(self, m: Machine, store: QuiverStore) -> None:
        with self.on(m):
            store.close()

    def watched_for_ttl(self, m: Machine, key: str) -> None:
        """``m`` has seen the lease ``key`` unchanged for longer than its ttl (the test
        moves the start of the observation back instead of waiting)."""
        got = self.h.bucket_objects().get(key)
        if got is None:
            return
        with self.on(m):
            now = lease_mod.elapsed()
            lease_mod._seen[(self.h.root, key)] = lease_mod._Seen(
                got.version, now - lease_mod.DEFAULT_TTL_S - 1.0, lease_mod.elapsed
            )

    def lease_epoch(self, key: str) -> int:
        got = self.h.bucket_objects().get(key)
        if got is None:
            return 0
        return lease_mod.decode_lease(key, got.data).epoch


# -- holding a holder ----------------------------------------------------------------------------
class Hold:
    """Holds the requests of one handle's threads from the first ``request`` (an
    ``op:kind``) on, in ``phase`` (``before`` it is made, or ``after`` it landed), until
    :meth:`release`; ``suspend``: ``machine``'s boot-time clock jumps by
    :data:`SUSPEND_S` at the hold point. The test's own thread is never held."""

    def __init__(
        self,
        objects: Any,
        request: str,
        phase: str,
        machine: Machine,
        suspend: bool,
    ) -> None:
        self.op, self.kind = request.split(":")
        self.phase = phase
        self.machine = machine
        self.suspend = suspend
        self.reached = threading.Event()
        self.released = threading.Event()
        self.late: list[tuple[str, str]] = []
        self.objects: Any = None
        self.prev = Faults()
        if objects is not None:
            self.attach(objects)

    def attach(self, objects: Any) -> None:
        """Hold the requests of the handle whose objects these are (its hooks kept, for
        the test's own thread)."""
        self.objects = objects
        self.prev = objects.faults
        objects.faults = Faults(before=self._before, after=self._after)

    @staticmethod
    def _main() -> bool:
        return threading.current_thread() is threading.main_thread()

    def _match(self, op: str, key: str) -> bool:
        return op == self.op and object_kind(key) == self.kind

    def _reach(self) -> None:
        if self.suspend:
            self.machine.suspended_s += SUSPEND_S
        self.reached.set()

    def _wait(self) -> None:
        if not self.released.wait(HOLD_TIMEOUT_S):
            raise OSError(f"a request held for {HOLD_TIMEOUT_S:g} s was never released")

    def _before(self, op: str, key: str) -> None:
        if self._main():
            if self.prev.before is not None:
                self.prev.before(op, key)
            return
        if not self.reached.is_set():
            if self.phase != "before" or not self._match(op, key):
                return
            self._reach()
        self._wait()
        self.late.append((op, object_kind(key)))

    def _after(self, op: str, key: str) -> None:
        if self._main():
            if self.prev.after is not None:
                self.prev.after(op, key)
            return
        if not self.reached.is_set() and self.phase == "after" and self._match(op, key):
            self._reach()
            self._wait()

    def release(self) -> None:
        self.released.set()

    def restore(self) -> None:
        self.release()
        if self.objects is not None:
            self.objects.faults = self.prev


class Holder:
    """A holder's call, run in a thread of its own as machine ``m``."""

    def __init__(self, world: World, m: Machine, fn: Callable[[], Any]) -> None:
        self.world = world
        self.m = m
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"held-{m.name}", daemon=True)

    def _run(self) -> None:
        self.world._tls.machine = self.m
        try:
            self.result = self.fn()
        except BaseException as e:
            self.error = e

    def start_until(self, hold: Hold) -> bool:
        """Start the call; True once it is held, False when it ended without meeting
        the held request."""
        self.thread.start()
        deadline = time.monotonic() + HOLD_TIMEOUT_S
        while not hold.reached.wait(0.002):
            if not self.thread.is_alive():
                return hold.reached.is_set()
            if time.monotonic() > deadline:
                hold.release()
                raise StuckHolder(f"{self.m.name} neither finished nor met its hold")
        return True

    def finish(self, hold: Hold) -> None:
        """Release the held requests (they go out now, in order), wait for the call to
        end, give the handle its own hooks back."""
        hold.release()
        try:
            if self.thread.ident is not None:
                self.thread.join(HOLD_TIMEOUT_S)
            if self.thread.is_alive():
                raise StuckHolder(
                    f"{self.m.name}'s call did not finish {HOLD_TIMEOUT_S:g} s after its "
                    "requests were released"
                )
        finally:
            hold.restore()


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "completed"
    if isinstance(error, LeaseLostError):
        return "fenced"
    if isinstance(error, (QuiverError, OSError)):
        return "refused"
    raise WrongError(f"a late holder failed with {type(error).__name__}: {error}") from error


# -- scenarios ----------------------------------------------------------------------------------
def ready(h: ObjectStoreHarness) -> bool:
    """No fault armed or pending, nothing damaged: a scenario's expectations are plain."""
    return (
        h.reader is not None
        and not h.damage
        and not h.damaged_parts
        and not h.registry_broken
        and not h.live_due
        and not h.active_faults()
        and not h.any_fired()
    )


def _same(a: object, b: object) -> bool:
    """``a is b`` (a function: a comparison narrows neither's type)."""
    return a is b


def _variant(h: StoreHarness) -> str:
    h._expect_schema("base")
    return next(
        (v for v in VARIANTS if h.store_schema is None or compatible(h.store_schema, _schema(v))),
        "base",
    )


def _check_read(h: StoreHarness, who: str, keys: list[int]) -> None:
    # a consumer that read a segment before retention deleted it read nothing wrong
    bad = sorted(k for k in keys if h.status.get(k) in (sm.RAISED, TXN, DISCARDED, sm.REFUSED))
    if bad:
        raise sm.UndecidedVisible(
            f"{who} read rows that must never be visible: {sm._span(bad)} ({h._describe(bad)})"
        )


def _decided(h: StoreHarness, app: str, v: int, winners: list[Txn]) -> None:
    """The model of a decision of ``(app, v)`` that stands (as :meth:`StoreHarness.commit`)."""
    for t in h.txns:
        if t.app != app or t.version != v:
            continue
        win = t in winners
        t.state = "won" if win else "lost"
        for k in t.keys:
            if h.status[k] == TXN:
                h.status[k] = COMMITTED if win else DISCARDED
            if win and (t.unsealable or t.held) and h.status[k] == COMMITTED:
                h.status[k] = sm.MAYBE
    h.version[app] = v + 1
    sm.STATS["commits"] += 1


def _stage_a_task(h: ObjectStoreHarness, p: str, app: str, stage: bool = True) -> Txn | None:
    """A task of ``app``'s current batch on ``p``: begun, rows appended, flushed (and
    staged, as the sink does, when ``stage``)."""
    before = len(h.txns)
    h.begin(p, app)
    if len(h.txns) == before:
        return None
    t = h.txns[-1]
    h.txn_append(t, _variant(h), 7)
    if stage:
        h.flush(p)
    else:
        StoreHarness.flush(h, p)
    return t


class Scenarios:
    """The rules' scenarios over one harness (see the module docstring)."""

    def __init__(self, h: ObjectStoreHarness) -> None:
        self.h = h
        self.world = World(h)
        self._holds: list[tuple[Hold, str]] = []

    def close(self) -> None:
        self.world.uninstall()

    # -- successors ------------------------------------------------------------------------
    def _writer_elsewhere(self, p: str) -> bool:
        """A writer of ``p`` on another machine, having watched its lease unchanged for
        the ttl, takes the partition over: appends rows, flushes, ticks (sealing what
        the lost holder committed and staged), seals, closes (releasing the lease)."""
        h, w = self.h, self.world
        m = w.machine("writer")
        key = f"partitions/{p}/LEASE"
        w.watched_for_ttl(m, key)
        try:
            store = w.open(m, p)
        except LeaseHeldError as e:
            raise WrongError(
                f"a writer of {p} that watched its lease unchanged for the ttl was refused: {e}"
            ) from e
        try:
            with w.on(m):
                keys = h._keys(7, p, PENDING)
                store.append(make_batch(_variant(h), keys))
                store.flush()
                for k in keys:
                    h.status[k] = sm.ACKED
                store.maintain()
                store.finalize()
        except (QuiverError, OSError) as e:
            raise WrongError(f"the successor writer of {p} failed: {type(e).__name__}: {e}") from e
        finally:
            w.close(m, store)
        sm.STATS["held:successor_writers"] += 1
        return True

    def _observer_elsewhere(self, p: str) -> bool:
        """An observer on another machine, having watched ``p``'s writer lease unchanged
        for the ttl, seals its committed staged transactions. True when it took the
        lease (there was something to seal)."""
        w = self.world
        m = w.machine("observer")
        key = f"partitions/{p}/LEASE"
        before = w.lease_epoch(key)
        w.watched_for_ttl(m, key)
        store = w.open(m, None)
        try:
            with w.on(m):
                store.finalize_idle_partitions()
            failures = dict(store.idle_failures)
        finally:
            w.close(m, store)
        if failures:
            raise WrongError(f"an observer sealing for a paused writer failed: {failures}")
        sm.STATS["held:successor_observers"] += 1
        return w.lease_epoch(key) > before

    # -- the roles ---------------------------------------------------------------------------
    def hold(self, request: str, role: str, phase: str, suspend: bool, choice: int) -> str | None:
        """Hold ``role``'s next ``request`` (and every later request of it) while others
        go on, then deliver them late. None: the store cannot meet the scenario now."""
        h = self.h
        if not ready(h):
            return None
        run = {
            "writer": self._writer,
            "sealer": self._sealer,
            "consumer": self._consumer,
            "retention": self._retention,
            "driver": self._driver,
        }[role]
        h.rule = f"hold_{role}"
        try:
            outcome = run(request, phase, suspend, choice)
        finally:
            self._count_late()
        if outcome is not None:
            OUTCOMES[role, outcome] += 1
            sm.STATS["held:scenarios"] += 1
        return outcome

    def _fired(self, hold: Hold, request: str, role: str) -> None:
        HELD[request, role, MODES[hold.suspend]] += 1
        self._holds.append((hold, role))

    def _count_late(self) -> None:
        """Count the requests each finished holder sent after its hold point."""
        for hold, role in self._holds:
            for op, kind in hold.late:
                LATE[f"{op}:{kind}", role] += 1
        self._holds.clear()

    def _writer(self, request: str, phase: str, suspend: bool, choice: int) -> str | None:
        """The writer of ``p`` (this process) is held in a finalize, a staging, a
        renewal or (``list:segments``) the recovery of its next process; a writer on
        another machine (or an observer, when there is a committed staged transaction
        to seal) takes its partition over."""
        h, w = self.h, self.world
        live = [p for p in h.live_writers() if p not in h.damaged_parts]
        if not live:
            return None
        p = live[choice % len(live)]
        if request == "list:segments":
            return self._writer_recovering(p, request, phase, suspend)
        app = APPS[choice % 2]
        held_store = h.writers[p]
        assert held_store is not None and held_store.writer is not None
        store: QuiverStore = held_store
        lease = held_store.writer.lease
        assert lease is not None
        w.install()
        t: Txn | None = None
        if request in ("create:staged", "get:lease"):
            t = _stage_a_task(h, p, app, stage=False)
            if t is None or not _same(h.writers[p], store):
                return None
            task = t

            def fn() -> Any:
                return store.stage_txn(task.txn_id, list(task.batches))

        else:
            if request == "delete:staged":  # a committed staged transaction to seal
                t = _stage_a_task(h, p, app)
                if t is None or not t.staged:
                    return None
                h.commit(app, h.candidates(app))
            h.append(p, _variant(h), 7)
            h.flush(p)
            if not _same(h.writers[p], store):
                return None
            tick = request == "replace:lease"

            def fn() -> Any:
                if tick:
                    assert lease.keeper is not None
                    lease.keeper.tick()
                store.maintain()
                return store.finalize()

        hold = Hold(store.objects, request, phase, w.home, suspend)
        holder = Holder(w, w.home, fn)
        took = False
        try:
            if not holder.start_until(hold):
                return self._not_reached(hold, holder, t, request)
            self._fired(hold, request, role="writer")
            committed = any(
                x.partition == p and x.staged and x.state == "won" and not x.unsealable
                for x in h.txns
            )
            if (choice // 2) % 2 and committed:
                took = self._observer_elsewhere(p)
            if not took:
                took = self._writer_elsewhere(p)
            # the successor fenced the partition: its epoch is in the MANIFEST (an
            # observer that found nothing to seal took the lease and wrote nothing, so
            # what this writer publishes until its keeper sees the lease gone is
            # accepted, and harmless: nobody else wrote the partition)
            fenced = self._manifest_epoch(p) > lease.epoch
        finally:
            holder.finish(hold)
        outcome = _outcome(holder.error)
        self._staged(t, request, holder.error)
        self.check_published_objects(f"a writer held at its {request} ({phase})")
        # a publication (or a staging reported) whose requests went out after the lease
        # moved: the storage must have refused it
        landed = phase == "after" and request in ("replace:manifest", "get:lease")
        staging = request in ("create:staged", "get:lease")
        if (
            (fenced or (took and staging))
            and not landed
            and request != "delete:staged"
            and outcome == "completed"
        ):
            raise ZombiePublished(
                f"the writer of {p}, held at its {request} ({phase}, "
                f"{'suspended' if suspend else 'partitioned'}) while another holder took "
                f"its lease over, went on to complete its call "
                f"({holder.result}); its late requests: {hold.late}"
            )
        if fenced:
            self._next_publication_refused(p, store)
        else:
            sm.STATS["held:successor_wrote_nothing"] += 1
        h.kill(p)  # the paused process ends; its machine comes back with its disk
        h.recover_and_check()
        return outcome

    def _writer_recovering(self, p: str, request: str, phase: str, suspend: bool) -> str:
        """The writer process of ``p`` dies with rows durable in its WAL and starts
        again on its machine; its recovery (after it fenced the MANIFEST) is held at
        ``request``; a writer on another machine takes the partition over and
        publishes; then the recovery's requests go out late. It removes nothing it did
        not publish (a successor's segment keeps its objects: the model's check), and
        its next publication is refused."""
        import quiver_spark.store as store_mod

        h, w = self.h, self.world
        h.append(p, _variant(h), 7)
        h.flush(p)
        if h.writers[p] is None:
            return "not reached"
        h.kill(p)
        hold = Hold(None, request, phase, w.home, suspend)
        opened = store_mod.open_objects

        def open_objects(*args: Any, **kw: Any) -> Any:
            objects = opened(*args, **kw)
            if threading.current_thread() is holder.thread:
                hold.attach(objects)
            return objects

        def reopen() -> QuiverStore:
            return QuiverStore.open(h.root, h.cfg, partition=p, io=h.io, background=False)

        holder = Holder(w, w.home, reopen)
        store_mod.open_objects = open_objects
        try:
            reached = holder.start_until(hold)
            if reached:
                self._fired(hold, request, role="writer")
                store_mod.open_objects = opened
                self._writer_elsewhere(p)
        finally:
            store_mod.open_objects = opened
            holder.finish(hold)
        store = holder.result
        outcome = _outcome(holder.error)
        self.check_published_objects(f"a recovery held at its {request} ({phase})")
        if store is not None:
            if reached:
                self._next_publication_refused(p, store)
            h._kill_handle(store)
        h.recover_and_check()  # its machine's next process recovers its WAL
        return outcome if reached else "not reached"

    def _not_reached(self, hold: Hold, holder: Holder, t: Txn | None, request: str) -> str:
        """The held call ended without meeting its request: nothing was held, nothing
        moved, so nothing may have failed."""
        holder.finish(hold)
        if holder.error is not None:
            raise WrongError(
                f"a call that met no hold failed: {type(holder.error).__name__}: {holder.error}"
            ) from holder.error
        self._staged(t, request, None)
        self.h.recover_and_check()
        return "not reached"

    def check_published_objects(self, who: str) -> None:
        """Every segment a MANIFEST lists has its ``.arrow`` and ``.meta``
        (:class:`PublishedObjectRemoved`)."""
        from quiver_spark.control.manifest_store import ManifestStore
        from quiver_spark.errors import CorruptionError

        objects = self.h.bucket_objects()
        names = {o.key for o in objects.list("segments/")}
        for p in sm.PARTS:
            try:
                got = ManifestStore(objects).read(p)
            except CorruptionError:
                continue  # damaged: decided by its files (the model's checks)
            if got is None:
                continue
            for e in got.entries:
                missing = [
                    f"{e.seq:020d}.{ext}"
                    for ext in ("arrow", "meta")
                    if f"segments/{p}/{e.seq:020d}.{ext}" not in names
                ]
                if missing:
                    raise PublishedObjectRemoved(
                        f"after {who}, segment {p}/{e.seq} is listed by the MANIFEST "
                        f"(epoch {got.epoch}) without {missing}"
                    )

    def _manifest_epoch(self, p: str) -> int:
        from quiver_spark.control.manifest_store import ManifestStore

        got = ManifestStore(self.h.bucket_objects()).read(p)
        return got.epoch if got is not None else 0

    def _staged(self, t: Txn | None, request: str, error: BaseException | None) -> None:
        """The model of a held staging: reported (a commit candidate) only if it returned."""
        if t is None or request not in ("create:staged", "get:lease"):
            return
        if error is None:
            t.staged = True
            sm.STATS["txns_staged"] += 1
        else:
            t.stage_failed = True

    def _next_publication_refused(self, p: str, store: QuiverStore) -> None:
        """Every later publication of a writer whose lease moved is refused: one more
        row appended, flushed (durable in its WAL: sealed once its machine is back),
        and its seal is a LeaseLostError."""
        h = self.h
        keys = h._keys(1, p, PENDING)
        try:
            store.append(make_batch(_variant(h), keys))
        except LeaseLostError:
            for k in keys:
                h.status[k] = sm.REFUSED  # refused before anything was written
            sm.STATS["held:zombie_refused_at_append"] += 1
            return
        try:
            store.flush()
        except LeaseLostError:
            for k in keys:
                h.status[k] = sm.MAYBE  # written, never acknowledged: its WAL may keep it
            sm.STATS["held:zombie_refused_at_flush"] += 1
            return
        for k in keys:
            h.status[k] = sm.ACKED
        try:
            meta = store.finalize()
        except LeaseLostError:
            sm.STATS["held:zombie_refused_at_seal"] += 1
            return
        raise ZombiePublished(
            f"a writer of {p} whose lease another holder took over published segment "
            f"{meta.seq if meta else None} afterwards"
        )

    def _sealer(self, request: str, phase: str, suspend: bool, choice: int) -> str | None:
        """``p``'s machine is lost with a committed staged transaction; an observer on
        another machine seals for it and is held; meanwhile the partition's writer
        comes back (an empty disk) and takes the lease over from the observer."""
        h, w = self.h, self.world
        live = [p for p in h.live_writers() if p not in h.damaged_parts]
        if not live:
            return None
        p = live[choice % len(live)]
        app = APPS[choice % 2]
        t = _stage_a_task(h, p, app)
        if t is None or not t.staged:
            return None
        h.commit(app, h.candidates(app))
        if t.state != "won" or h.writers[p] is None:
            return None
        h._machine_gone(p)
        sm.STATS["machine_losses:held_observer"] += 1
        key = f"partitions/{p}/LEASE"
        m = w.machine("observer")
        w.watched_for_ttl(m, key)
        store = w.open(m, None)
        hold = Hold(store.objects, request, phase, m, suspend)
        holder = Holder(w, m, store.finalize_idle_partitions)
        try:
            if not holder.start_until(hold):
                holder.finish(hold)
                _outcome(holder.error)
                w.close(m, store)
                h.lost_leases.discard(p)
                h.recover_and_check()
                return "not reached"
            self._fired(hold, request, role="sealer")
            # the writer of p comes back and watched the observer's lease for its ttl
            h.lost_leases.discard(p)
            w.watched_for_ttl(w.home, key)
            h.start_writer(p)
            if h.writers[p] is None:
                raise WrongError(f"the writer of {p} did not come back beside a held observer")
            h.maintain(p)
            h.finalize(p)
        finally:
            holder.finish(hold)
        outcome = _outcome(holder.error)
        self.check_published_objects(f"an observer held at its {request} ({phase})")
        failure = store.idle_failures.get(p, "")
        if outcome == "completed" and "was lost" in failure:
            outcome = "fenced"
        elif outcome == "completed" and failure:
            outcome = "refused"
        elif outcome == "completed":
            outcome = "sealed" if any(q == p for q, _ in holder.result) else "nothing to seal"
        w.close(m, store)
        h.recover_and_check()  # every committed row once: a late seal would duplicate
        return outcome

    def _consumer(self, request: str, phase: str, suspend: bool, choice: int) -> str | None:
        """A live consumer on one machine polls, reads and acknowledges and is held; a
        consumer of the same subscriber on another machine, having watched its lease
        unchanged for the ttl, claims the subscriber and consumes; then the first
        one's requests go out late: an acknowledgement written after the claim must be
        refused."""
        h, w = self.h, self.world
        subs = sorted(h.subs)
        if not subs:
            return None
        sub = subs[choice % len(subs)]
        self._sealed_first()
        if len([key for key in h.live if key not in h.subs[sub]]) < 3:
            h.append_compatible_everywhere()  # two segments more for each to read
            h.observe()  # seen before a consumer's acknowledgement lets retention delete them
            if not ready(h) or sub not in h.subs:
                return None
        mz = w.machine("consumer")
        zs = w.open(mz, None)
        with w.on(mz):
            zc = Subscription(zs, sub, live=True, fail_on_data_loss=False)
            held = live_mod._live.get(zs.objects.display(live_mod.live_lease_key(sub)))
        assert held is not None and isinstance(held.lock, lease_mod.Lease)
        zlease = held.lock
        hold = Hold(zs.objects, request, phase, mz, suspend)
        calls: list[str] = []
        reg = zs.subscribers
        record_many = reg.record_many

        def recorded(*args: Any, **kw: Any) -> None:
            n = len(hold.late)
            try:
                record_many(*args, **kw)
            except BaseException:
                calls.append("refused")
                raise
            calls.append("late" if ("create", "acklog") in hold.late[n:] else "on time")

        reg.record_many = recorded
        seen_z: list[int] = []

        def fn() -> None:
            if request == "replace:readers-lease":
                assert zlease.keeper is not None
                zlease.keeper.tick()
            for _ in range(2):
                batch = zc.poll()
                if batch is None:
                    return
                for meta in batch.segments:
                    for b in zc.read(meta):
                        seen_z.extend(b.column("k").to_pylist())
                zc.ack(batch.end)

        holder = Holder(w, mz, fn)
        took = False
        seen_b: list[int] = []
        try:
            reached = holder.start_until(hold)
            if reached:
                self._fired(hold, request, role="consumer")
                took = self._consumer_elsewhere(sub, seen_b)
        finally:
            holder.finish(hold)
            with w.on(mz):
                zc.close()
            w.close(mz, zs)
        outcome = _outcome(holder.error)
        _check_read(h, f"a held consumer of {sub}", seen_z)
        _check_read(h, f"the consumer of {sub} that took over", seen_b)
        if took and "late" in calls:
            raise LateAckRecorded(
                f"a live consumer of {sub} held at its {request} ({phase}, "
                f"{'suspended' if suspend else 'partitioned'}) while another consumer "
                f"claimed the subscriber had an acknowledgement written afterwards "
                f"recorded (its calls: {calls}, late requests: {hold.late})"
            )
        self._sync_acks(sub)
        sm.STATS["live_consumer_runs"] += 1
        h.recover_and_check()
        return outcome if reached else "not reached"

    def _sealed_first(self) -> None:
        """What any process's next pass would seal now (a released writer lease's
        committed staged transactions, a dead writer's WAL here) is sealed by this
        process's driver and observed first: a consumer's planning or a pass on another
        machine then publishes nothing the model has not seen (and deletes nothing it
        never saw)."""
        h = self.h
        reader = h.reader
        assert reader is not None
        h._engine("the driver's pass", reader.finalize_idle_partitions)
        h.observe()

    def _sync_acks(self, sub: str) -> None:
        """The model of ``sub``'s acknowledgements follows the ack log (consumers of
        other machines acknowledged)."""
        h = self.h
        if sub in h.subs:
            fresh = h._fresh_registry()
            h.subs[sub].update(key for key in h.segs if fresh.is_done(sub, *key))
            # and segments sealed in the consumer's own planning (an idle partition, a
            # lost machine's transactions) that the model has not observed yet
            h.subs[sub].update(
                (p, seq)
                for p in sm.PARTS
                for seq in range(1, fresh.hwm(sub, p) + 1)
                if fresh.is_done(sub, p, seq)
            )

    def _consumer_elsewhere(self, sub: str, seen: list[int]) -> bool:
        """``sub``'s consumer on another machine: claims it (its lease watched for the
        ttl), consumes one segment, closes: what the held one acknowledges beyond it
        afterwards would be rows this consumer never delivered."""
        from quiver_spark.subscription.planning import Caps

        h, w = self.h, self.world
        m = w.machine("consumer")
        w.watched_for_ttl(m, live_mod.live_lease_key(sub))
        store = w.open(m, None)
        try:
            with w.on(m):
                c = Subscription(store, sub, live=True, fail_on_data_loss=False)
                try:
                    batch = c.poll(Caps(max_segments=1))
                    if batch is not None:
                        for meta in batch.segments:
                            for b in c.read(meta):
                                seen.extend(b.column("k").to_pylist())
                        c.ack(batch.end)
                finally:
                    c.close()
        except (QuiverError, OSError) as e:
            raise WrongError(
                f"the consumer of {sub} that took over failed: {type(e).__name__}: {e}"
            ) from e
        finally:
            w.close(m, store)
        self._sync_acks(sub)  # its acknowledgement may have let retention delete
        h.observe()
        sm.STATS["held:successor_consumers"] += 1
        return True

    def _retention(self, request: str, phase: str, suspend: bool, choice: int) -> str | None:
        """A retention pass (``run_retention``, or ``quiver gc``'s ``run_gc``) of a process
        on another machine is held while writers seal, consumers acknowledge, a new
        subscriber registers (from the earliest segment: what the held pass planned to
        delete is needed again) and this process's own retention runs; then its
        requests go out late. The new subscriber leaves once checked."""
        h, w = self.h, self.world
        if not h.subs and h.opts.policy is None and not h.opts.time_retention:
            return None
        self._sealed_first()
        h.append_compatible_everywhere()
        h.observe()
        for sub in sorted(h.subs):
            if ready(h):
                h.ack(sub, 8, "ack")
        if not ready(h):
            return None
        m = w.machine("gc")
        store = w.open(m, None)
        via_gc = choice % 2 == 1

        def fn() -> Any:
            if via_gc:
                from quiver_spark.cli.gc import run_gc

                return run_gc(store, dry_run=False)
            return store.run_retention()

        hold = Hold(store.objects, request, phase, m, suspend)
        holder = Holder(w, m, fn)
        newcomer = f"n{sm.STATS['fresh_subscribers']}"
        try:
            reached = holder.start_until(hold)
            if reached:
                self._fired(hold, request, role="retention")
                h.append_compatible_everywhere()
                h.observe()
                if choice % 2 == 0 and ready(h):
                    sm.STATS["fresh_subscribers"] += 1
                    h.register(newcomer)
                for sub in sorted(h.subs):
                    if ready(h) and sub != newcomer:
                        h.ack(sub, 2, "ack")
                if ready(h):
                    h.retention(False, choice % 3 == 0)
        finally:
            holder.finish(hold)
            w.close(m, store)
        outcome = _outcome(holder.error)
        h.observe()  # what the late pass deleted: every subscriber done with it
        if newcomer in h.subs and ready(h):
            h.deregister(newcomer)
        h.recover_and_check()
        return outcome if reached else "not reached"

    def _driver(self, request: str, phase: str, suspend: bool, choice: int) -> str | None:
        """A driver (another process) deciding a batch is held at its commit record;
        this process's driver, restarted, decides the same batch otherwise: exactly one
        decision stands, and the model follows it."""
        h, w = self.h, self.world
        app = APPS[choice % 2]
        if not h.candidates(app):
            live = [p for p in h.live_writers() if p not in h.damaged_parts]
            if live:
                _stage_a_task(h, live[choice % len(live)], app)
            if not ready(h):
                return None
        v = h.version[app]
        cands = h.candidates(app)
        mine = list(cands)
        theirs = [] if choice % 2 else cands[:1]
        if [t.txn_id for t in theirs] == [t.txn_id for t in mine]:
            theirs = []
        m = w.machine("driver")
        store = w.open(m, None)

        def names(ts: list[Txn]) -> list[tuple[str, int]]:
            return [(t.partition, t.txn_id) for t in ts]

        hold = Hold(store.objects, request, phase, m, suspend)
        holder = Holder(
            w, m, lambda: store.commit_txn(app, v, names(mine), sum(len(t.keys) for t in mine))
        )
        reader = h.reader
        assert reader is not None
        try:
            reached = holder.start_until(hold)
            if reached:
                self._fired(hold, request, role="driver")
            ours, _ = h._engine(
                f"commit {app}/{v} beside a held driver",
                lambda: reader.commit_txn(app, v, names(theirs), sum(len(t.keys) for t in theirs)),
            )
        finally:
            holder.finish(hold)
            w.close(m, store)
        outcome = _outcome(holder.error)
        if holder.error is not None:
            raise WrongError(
                f"a driver's commit of {app}/{v} held at its record failed: {holder.error}"
            )
        if bool(holder.result) == bool(ours):
            raise TwoDecisions(
                f"two drivers decided {app}/{v} ({len(mine)} and {len(theirs)} winners), the "
                f"held one at its {request} ({phase}): held said {holder.result}, the other "
                f"{ours}"
            )
        _decided(h, app, v, mine if holder.result else theirs)
        outcome = "won" if holder.result else "refused"
        h.recover_and_check()
        return outcome if reached else "not reached"

    # -- skewed wall clocks ----------------------------------------------------------------------
    def skew(self, role: str, hours: int, choice: int) -> str | None:
        """Machines whose wall clocks are ``hours`` off (ahead when positive) take part in
        subscriber expiry, which the store's policy now has (an hour by the storage's
        clock): a consumer acknowledges while a pass runs on a clock the other way, a
        pass (``run_retention`` or ``run_gc``) runs on the skewed clock. Nobody is
        expired."""
        h, w = self.h, self.world
        if not ready(h) or not h.subs:
            return None
        h.expire_idle_subscribers()
        m = w.machine(role)
        m.skew_ns = hours * sm.HOUR_NS
        other = w.machine("retention")
        other.skew_ns = -m.skew_ns
        h.rule = f"skew_{role}"
        self._sealed_first()  # every segment seen before a pass deletes what was acknowledged
        if role == "consumer":
            sub = sorted(h.subs)[choice % len(h.subs)]
            store = w.open(m, None)
            seen: list[int] = []
            try:
                with w.on(m):
                    c = Subscription(store, sub, live=True, fail_on_data_loss=False)
                try:
                    with w.on(m):
                        batch = c.poll()
                        if batch is not None:
                            for meta in batch.segments:
                                for b in c.read(meta):
                                    seen.extend(b.column("k").to_pylist())
                            c.ack(batch.end)
                    _check_read(h, f"a consumer of {sub} {hours:+d} h off", seen)
                    self._sync_acks(sub)
                    self._pass(other, gc=choice % 2 == 1)  # while it is live
                    h.check_nothing_expired(f"a pass {hours:+d} h off beside a live consumer")
                finally:
                    with w.on(m):
                        c.close()
            finally:
                w.close(m, store)
            self._observe_skewed()
        self._pass(m if role != "consumer" else other, gc=role == "gc")
        h.check_nothing_expired(f"a {role} {hours:+d} h off")
        self._observe_skewed()
        SKEWS[role, "ahead" if hours > 0 else "behind"] += 1
        return "kept"

    def _observe_skewed(self) -> None:
        """Observe what passes on skewed clocks deleted. ``retention.max_age`` is
        defined on ingestion times as written (§15.1): a pass whose clock is hours ahead
        drops segments early, each recorded dropped for whoever had not acknowledged
        it (the model checks those records)."""
        h = self.h
        if h.opts.time_retention:
            h.drop_window = True
        h.observe()

    def _pass(self, m: Machine, *, gc: bool) -> None:
        """A retention pass on ``m`` (``quiver gc``'s ``run_gc`` when ``gc``)."""
        w = self.world
        store = w.open(m, None)
        try:
            with w.on(m):
                if gc:
                    from quiver_spark.cli.gc import run_gc

                    run_gc(store, dry_run=False)
                else:
                    store.run_retention()
        except (QuiverError, OSError) as e:
            raise WrongError(f"a retention pass on {m.name} failed: {e}") from e
        finally:
            w.close(m, store)


def walk_every_held_pair(make: Callable[[int], Any]) -> dict[str, list[str]]:
    """Every (request kind, role) of :data:`HELD_PAIRS` held on a store with history
    (``make(i)`` gives the ``i``-th started state machine with its warm-up done): once
    partitioned before the request goes out (the case the storage alone must refuse),
    once suspended, before and after the request in turn. Returns the pairs (and role
    modes) whose hold never fired."""
    missed: dict[str, list[str]] = {"pairs": [], "modes": []}
    runs = [
        run
        for i, pair in enumerate(HELD_PAIRS)
        for run in ((pair, False, "before"), (pair, True, ("before", "after")[i % 2]))
    ]
    for i, ((request, role), suspend, phase) in enumerate(runs):
        before = HELD[request, role, MODES[suspend]]
        m = make(i)
        try:
            got = m.scenarios().hold(request, role, phase, suspend, i)
            assert m.h is not None
            m.h.rule = "walk"
            m.h.kill_all()
            m.h.recover_and_check()
        finally:
            m.teardown()
        sm.STATS["held_walk_steps"] += 1
        if HELD[request, role, MODES[suspend]] == before:
            missed["pairs"].append(f"{request}@{role} ({MODES[suspend]}, {phase}: {got})")
    for role in ROLE_REQUESTS:
        for mode in MODES:
            if not any(k[1] == role and k[2] == mode for k in HELD):
                missed["modes"].append(f"{role} ({mode})")
    return missed


def walk_every_skew(make: Callable[[int], Any]) -> list[str]:
    """Each skew role, ahead and behind, once. Returns those that did not run."""
    missed = []
    for i, (role, sign) in enumerate(
        (role, sign) for role in ("consumer", "retention", "gc") for sign in (1, -1)
    ):
        m = make(i)
        try:
            got = m.scenarios().skew(role, sign * SKEW_HOURS[i % len(SKEW_HOURS)], i)
            assert m.h is not None
            m.h.kill_all()
            m.h.recover_and_check()
        finally:
            m.teardown()
        if got is None:
            missed.append(f"{role} ({'ahead' if sign > 0 else 'behind'})")
    return missed
