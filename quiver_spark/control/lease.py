"""Leases with epoch fencing over a root's objects (ARCHITECTURE.md §8.2).

A lease is one object (a §6 frame, magic ``QLSE``) naming its holder. Whoever holds it
rewrites it (``replace`` If-Match its own version) every ``ttl_s / 3``; each rewrite
makes a new version. Expiry is judged by the *observer*: an acquirer that sees the same
version for ``ttl_s`` of its own monotonic clock takes the lease over with
``epoch + 1`` (If-Match the version it watched), so wall clocks are never compared. A
released lease, or one whose holder is a dead process of this same host (its pid is
gone or has another start time), is taken over at once. A holder learns it was taken
over when its next rewrite finds another version: :class:`LeaseLostError`, and the
epoch it carried into the data it wrote (the MANIFEST) is fenced by the successor's.

One holder per lease per process, as :class:`~quiver_spark.fs.PartitionLock`: a second
acquirer in the process that holds it is refused, naming this process.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import msgpack

from ..errors import (
    ConfigError,
    CorruptionError,
    LeaseHeldError,
    LeaseLostError,
    LostRaceError,
    ObjectConflict,
    ObjectExists,
    VersionMismatch,
)
from ..format import MAGIC_LEASE, decode_frame, encode_frame
from ..objects.base import ObjectStore, Stored
from ..option_table import LEASE_TTL_DEFAULT
from . import cas
from .clock import elapsed
from .lease_keeper import LeaseKeeper

log = logging.getLogger(__name__)

DEFAULT_TTL_S = LEASE_TTL_DEFAULT
"""How long an observer must see one version before it takes the lease over (the
store option ``lease.ttl``'s default)."""

PURPOSE_WRITER = "writer"
"""The purpose a partition's writer LEASE names when its holder writes the partition."""

PURPOSE_SEALER = "sealer"
"""The purpose it names when its holder only seals committed rows a gone writer left
(§10.2): ``quiver status`` keeps naming that writer (its heartbeat, its last write)."""

_MAX_POLL_S = 1.0
ACT_MARGIN = 0.5
"""A holder acts (fences, publishes, acknowledges) without a request only while more
than this share of its lease's ttl is left since its last renewal; otherwise it renews
first (§8.2, :meth:`Lease.check_held`)."""
_QUICK_RETRIES = 8  # conflicts / lost races re-tried at once before a poll pause

Clock = Callable[[], float]

Stale = Callable[[Stored, float], bool]
"""A judge of expiry besides this process's observation: given a lease object as read
and its holder's ttl, True when the storage's own clock shows it unwritten for at
least that ttl (a slot claim, §8.2; :meth:`~quiver_spark.root_kind.ObjectRoot.stale`)."""


# -- who this process is ------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot), or None
    when the process does not exist, is a zombie, or there is no ``/proc``."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None or ")" not in raw:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # state, then field 4...
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def _node() -> str | None:
    """This kernel boot and pid namespace: processes with the same ``node`` see the
    same pids, so a pid that is gone is dead. None where there is no ``/proc``."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{ns}" if boot else None


@dataclass(frozen=True)
class _Identity:
    host: str
    pid: int
    pid_start: int | None
    node: str | None


_identity: _Identity | None = None


def _me() -> _Identity:
    """This process, as lease bodies name it (computed again after a fork)."""
    global _identity
    if _identity is None or _identity.pid != os.getpid():
        pid = os.getpid()
        _identity = _Identity(socket.gethostname(), pid, _start_time(pid), _node())
    return _identity


def _since() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time()))


@dataclass(frozen=True)
class HolderInfo:
    """Who holds a lease, as its object says (``since`` is advisory wall time)."""

    host: str
    pid: int
    token: str
    purpose: str
    since: str
    ttl_s: float
    pid_start: int | None = None
    node: str | None = None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.purpose} since {self.since})"

    def dead_here(self) -> bool:
        """True when the holder is a process of this host's node that is gone (or
        whose pid now belongs to another process)."""
        me = _me()
        if self.node is None or self.node != me.node or self.pid_start is None:
            return False
        return self.pid != me.pid and _start_time(self.pid) != self.pid_start

    def alive_here(self) -> bool:
        """True when the holder is a running process of this host's node."""
        me = _me()
        if self.node is None or self.node != me.node or self.pid_start is None:
            return False
        return _start_time(self.pid) == self.pid_start

    def is_this_process(self) -> bool:
        me = _me()
        return (
            self.pid == me.pid
            and self.node is not None
            and self.node == me.node
            and self.pid_start == me.pid_start
        )


@dataclass(frozen=True)
class LeaseBody:
    """A lease object's body (ARCHITECTURE.md §8.2): its epoch, whether its holder
    released it, its write count ``seq`` and who holds it."""

    epoch: int
    released: bool
    seq: int
    holder: HolderInfo


def _encode(epoch: int, holder: HolderInfo, *, seq: int, released: bool = False) -> bytes:
    return encode_frame(
        MAGIC_LEASE,
        {
            "epoch": epoch,
            "host": holder.host,
            "node": holder.node,
            "pid": holder.pid,
            "pid_start": holder.pid_start,
            "token": holder.token,
            "purpose": holder.purpose,
            "since_wall": holder.since,
            "ttl_s": holder.ttl_s,
            "seq": seq,
            "released": released,
        },
    )


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def decode_lease(where: str, raw: bytes) -> LeaseBody:
    """The body of a lease object's bytes ``raw`` (read from ``where``), or a
    :class:`~quiver_spark.errors.CorruptionError` naming ``where``."""
    body = decode_frame(where, MAGIC_LEASE, raw)
    try:
        epoch, token, ttl_s = body["epoch"], body["token"], float(body["ttl_s"])
        if not isinstance(epoch, int) or not isinstance(token, str) or not ttl_s >= 0:
            raise TypeError("epoch, token or ttl_s has the wrong type")
        holder = HolderInfo(
            host=str(body.get("host", "?")),
            pid=int(body.get("pid", -1)),
            token=token,
            purpose=str(body.get("purpose", "?")),
            since=str(body.get("since_wall", "?")),
            ttl_s=ttl_s,
            pid_start=_int_or_none(body.get("pid_start")),
            node=body.get("node") if isinstance(body.get("node"), str) else None,
        )
        return LeaseBody(epoch, bool(body.get("released", False)), int(body.get("seq", 0)), holder)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptionError(where, 16, f"lease body is not valid: {e}") from e


# -- this process's state -----------------------------------------------------------
_mutex = threading.Lock()
_held: dict[tuple[str, str], weakref.ReferenceType[Lease]] = {}  # (url, key) -> holder here
_acquiring: dict[tuple[str, str], threading.Lock] = {}  # one attempt at a time per key


@dataclass
class _Seen:
    version: str
    first: float
    clock: Clock


_seen: dict[tuple[str, str], _Seen] = {}  # what this process watched: (url, key) -> version


def _observe(ident: tuple[str, str], version: str, clock: Clock) -> float:
    """How long (by ``clock``) this process has seen ``version`` under the key."""
    now = clock()
    with _mutex:
        seen = _seen.get(ident)
        if seen is None or seen.version != version or seen.clock is not clock:
            _seen[ident] = seen = _Seen(version, now, clock)
    return now - seen.first


def _ident(objects: ObjectStore, key: str) -> tuple[str, str]:
    return (objects.url, key)


def _holder_here(ident: tuple[str, str]) -> Lease | None:
    with _mutex:
        ref = _held.get(ident)
    held = ref() if ref is not None else None  # still referenced by this process
    return held if held is not None and not held.lost() else None


class _Busy:
    """An attempt found the lease held: who holds it, and whether it was renewed."""

    def __init__(self, holder: str, renewed: bool) -> None:
        self.holder = holder
        self.renewed = renewed


_RETRY = object()  # a race was lost or a conflict met: look again at once


class Lease:
    """A held lease (see the module docstring). ``epoch`` fences writes made under it."""

    def __init__(
        self,
        objects: ObjectStore,
        key: str,
        epoch: int,
        holder: HolderInfo,
        version: str,
        *,
        seq: int,
        started: float,
        clock: Clock,
    ) -> None:
        self.objects = objects
        self.key = key
        self.epoch = epoch
        self.holder = holder
        self.ttl_s = holder.ttl_s
        self._version = version
        self._seq = seq
        self._renewed_at = started
        self._clock = clock
        self._lock = threading.RLock()
        self._lost: LeaseLostError | None = None
        self._released = False
        self.keeper: LeaseKeeper | None = None

    @property
    def url(self) -> str:
        return self.objects.display(self.key)

    # -- acquire ----------------------------------------------------------------------
    @classmethod
    def acquire(
        cls,
        objects: ObjectStore,
        key: str,
        *,
        purpose: str,
        ttl_s: float = DEFAULT_TTL_S,
        wait_s: float = 0.0,
        min_epoch: int = 0,
        stop_when_renewed: bool = False,
        clock: Clock = elapsed,
        sleep: Callable[[float], None] = time.sleep,
        stale: Stale | None = None,
    ) -> Lease:
        """Hold ``key``, waiting up to ``wait_s`` (polling) for its holder to release
        it, die on this host, or let it expire by this process's observation; else
        raise :class:`LeaseHeldError` naming the holder. ``min_epoch``: the new epoch
        is above it (a caller that knows an epoch written under the lease passes it,
        so a lease object that was deleted or damaged never restarts the epochs).
        ``stop_when_renewed``: give up as soon as the holder is seen renewing, or is a
        running process of this host (it is alive), instead of waiting out ``wait_s``.
        ``stale``: a lease it says is unwritten for its ttl by the storage's clock is
        expired too, without this process having watched it (a slot claim, §8.2)."""
        if not ttl_s > 0:
            raise ConfigError("lease ttl_s", ttl_s, "a positive number of seconds")
        ident = _ident(objects, key)
        with _mutex:
            serial = _acquiring.setdefault(ident, threading.Lock())
        deadline = clock() + wait_s
        poll = max(0.01, min(_MAX_POLL_S, ttl_s / 10))
        quick = 0
        while True:
            try:
                with serial:  # a winner is registered before this process looks again
                    got = cls._attempt(objects, key, purpose, ttl_s, min_epoch, clock, stale)
                    if isinstance(got, Lease):
                        with _mutex:
                            _held[ident] = weakref.ref(got)
                            _seen.pop(ident, None)
                        return got
            except OSError:
                if clock() >= deadline:
                    raise
                sleep(min(poll, max(0.0, deadline - clock())))
                continue
            if got is _RETRY and quick < _QUICK_RETRIES:
                quick += 1
                continue
            quick = 0
            busy = got if isinstance(got, _Busy) else _Busy("another holder", False)
            if clock() >= deadline or (stop_when_renewed and busy.renewed):
                raise LeaseHeldError(objects.display(key), busy.holder)
            sleep(min(poll, max(0.0, deadline - clock())))

    @classmethod
    def _attempt(
        cls,
        objects: ObjectStore,
        key: str,
        purpose: str,
        ttl_s: float,
        min_epoch: int,
        clock: Clock,
        stale: Stale | None = None,
    ) -> Lease | _Busy | object:
        where = objects.display(key)
        ident = _ident(objects, key)
        got = objects.get(key)
        if got is None:
            return cls._write(objects, key, purpose, ttl_s, min_epoch, None, clock)
        try:
            body: LeaseBody | None = decode_lease(where, got.data)
        except CorruptionError as e:
            body, damage = None, str(e)
        if body is not None:
            if body.released or body.holder.dead_here():
                return cls._write(
                    objects, key, purpose, ttl_s, max(min_epoch, body.epoch), got.version, clock
                )
            if body.holder.is_this_process():
                mine = _holder_here(ident)
                if mine is not None and mine.holder.token == body.holder.token:
                    return _Busy(
                        f"this process (pid {mine.holder.pid}, {mine.holder.purpose})", False
                    )
                # held under a lease this process dropped or lost: nobody uses it
                return cls._write(
                    objects, key, purpose, ttl_s, max(min_epoch, body.epoch), got.version, clock
                )
            expiry = body.holder.ttl_s
        else:
            expiry = ttl_s
        with _mutex:
            before = _seen.get(ident)
        watched = _observe(ident, got.version, clock)
        if watched >= expiry or (stale is not None and stale(got, expiry)):
            prior = body.epoch if body is not None else _salvage_epoch(got.data)
            return cls._write(
                objects, key, purpose, ttl_s, max(min_epoch, prior), got.version, clock
            )
        renewed = before is not None and before.version != got.version
        renewed = renewed or (body is not None and body.holder.alive_here())
        after = f"its lease expires {expiry:g} seconds after its last renewal"
        if body is None:
            who = (
                f"an unknown holder (the lease object is damaged: {damage}; "
                f"treated as held: {after} of observation)"
            )
        else:
            who = f"{body.holder.describe()}; {after}"
        return _Busy(who, renewed)

    @classmethod
    def _write(
        cls,
        objects: ObjectStore,
        key: str,
        purpose: str,
        ttl_s: float,
        prior_epoch: int,
        version: str | None,
        clock: Clock,
    ) -> Lease | object:
        """Create (``version`` None) or take over (If-Match ``version``) the lease with
        epoch ``prior_epoch + 1``; ``_RETRY`` when another write came first."""
        me = _me()
        holder = HolderInfo(
            host=me.host,
            pid=me.pid,
            token=secrets.token_hex(16),
            purpose=purpose,
            since=_since(),
            ttl_s=float(ttl_s),
            pid_start=me.pid_start,
            node=me.node,
        )
        epoch = prior_epoch + 1
        data = _encode(epoch, holder, seq=0)
        started = clock()
        try:
            if version is None:
                new = objects.create(key, data)
            else:
                new = objects.replace(key, data, version=version)
        except (ObjectExists, VersionMismatch, ObjectConflict):
            return _RETRY  # someone else wrote first (or a write was in flight): look again
        except OSError:
            # the outcome is unknown: ours if the object now carries our token
            got = objects.get(key)
            if got is None:
                raise  # nothing was written
            try:
                body = decode_lease(objects.display(key), got.data)
            except CorruptionError:
                return _RETRY
            if body.holder.token != holder.token:
                return _RETRY
            new = got.version
        log.info(
            "quiver.lease.acquired lease=%s epoch=%d purpose=%s",
            objects.display(key),
            epoch,
            purpose,
        )
        return cls(objects, key, epoch, holder, new, seq=0, started=started, clock=clock)

    # -- holding ----------------------------------------------------------------------
    def lost(self) -> bool:
        """True once a renewal found the lease taken over, deleted or unreadable."""
        return self._lost is not None

    def remaining(self) -> float:
        """Seconds (by this holder's clock) before an observer may judge the lease
        expired: ``ttl_s`` after the start of the last renewal that was written."""
        return self.ttl_s - (self._clock() - self._renewed_at)

    def renew(self) -> None:
        """Rewrite the lease (If-Match its own version). :class:`LeaseLostError` when
        another holder took it (and ``lost()`` stays True); an ``OSError`` when the
        renewal did not happen (the lease is still held: retry)."""
        with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._released:
                raise LeaseLostError(self.url, self.epoch, None, "this holder released it")
            started = self._clock()
            looked = landed = False

            def read() -> cas.Current[int]:
                """This holder's own version first (no request); after a lost write
                the lease as stored: LeaseLostError when it is not ours any more."""
                nonlocal looked, landed
                if looked:
                    landed = self._resolve(started) is True
                looked = True
                return cas.Current(self._seq, self._version)

            def change(seq: int | None) -> int | None:
                nonlocal started
                if landed:  # a renewal of ours had landed: adopted
                    return None
                self._seq += 1  # every attempt writes a seq of its own
                started = self._clock()
                return self._seq

            def resolve() -> str | None:
                # the renewal did not happen (None): the lease is still ours
                return self._version if self._resolve(started) else None

            written = cas.update(
                self.objects,
                self.key,
                change,
                read=read,
                encode=lambda seq: _encode(self.epoch, self.holder, seq=seq),
                resolve=resolve,
                give_up=lambda attempts: LostRaceError(
                    self.url,
                    f"lease {self.url} changed under its holder {attempts} times in a row "
                    "(it is still held)",
                    attempts=attempts,
                ),
            )
            if written is not None:
                self._version = written.version
                self._renewed_at = started

    @property
    def sealer(self) -> bool:
        """Whether this lease was taken only to seal what a gone writer left."""
        return self.holder.purpose == PURPOSE_SEALER

    def check_held(self) -> None:
        """Before an act only the holder may do (publish, fence, acknowledge): raise
        :class:`LeaseLostError` unless this holder still holds the lease, as far as can
        be told without a request: its keeper's error, or the loss a renewal found, is
        raised. After a pause that left less than :data:`ACT_MARGIN` of its ttl since
        the last renewal (the process was paused, its keeper fell behind), one renewal
        (one request) tells first: LeaseLostError when another holder took it over, an
        ``OSError`` when the renewal did not happen (the lease is still held: retry)."""
        keeper = self.keeper
        if keeper is not None and keeper.error is not None:
            raise keeper.error
        if self._lost is not None:
            raise self._lost
        if self.remaining() < self.ttl_s * ACT_MARGIN:
            self.renew()

    def confirm(self) -> None:
        """Read the lease (one GET) and raise :class:`LeaseLostError` unless this holder
        still holds it at its epoch: whatever this holder wrote before the call landed
        before any takeover."""
        with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._released:
                raise LeaseLostError(self.url, self.epoch, None, "this holder released it")
            self._resolve(self._renewed_at)

    def _resolve(self, started: float) -> bool | None:
        """After a renewal's precondition failed or its outcome is unknown, read the
        lease: True when it holds our renewal (adopted), None when it holds our own
        earlier version unchanged; raise LeaseLostError when it is not ours any more."""
        got = self.objects.get(self.key)
        if got is None:
            self._fence(None, "the lease object was deleted")
        try:
            body = decode_lease(self.url, got.data)
        except CorruptionError as e:
            self._fence(None, f"the lease object is damaged ({e}), so holding it cannot be proved")
        if body.holder.token != self.holder.token or body.epoch != self.epoch:
            self._fence(
                body.epoch, f"it now has epoch {body.epoch} held by {body.holder.describe()}"
            )
        if got.version == self._version:
            return None
        self._version, self._seq = got.version, max(self._seq, body.seq)
        if body.seq == self._seq:
            self._renewed_at = started
            return True
        return None

    def _fence(self, new_epoch: int | None, now: str) -> NoReturn:
        err = LeaseLostError(self.url, self.epoch, new_epoch, now)
        self._lost = err
        self._forget()
        log.error("quiver.lease.lost %s", err)
        raise err

    def _forget(self) -> None:
        ident = _ident(self.objects, self.key)
        with _mutex:
            ref = _held.get(ident)
            if ref is not None and ref() is self:
                del _held[ident]

    def release(self) -> None:
        """Mark the lease released so a successor takes it at once (best effort: a
        failure is logged, and the lease then expires ``ttl_s`` after its last
        renewal)."""
        keeper = self.keeper
        if keeper is not None:
            keeper.stop()
        with self._lock:
            if self._released or self._lost is not None:
                return
            self._released = True
            self._forget()
            data = _encode(self.epoch, self.holder, seq=self._seq + 1, released=True)
            try:
                self.objects.replace(self.key, data, version=self._version)
            except VersionMismatch:
                log.warning(
                    "quiver.lease.release_lost lease=%s epoch=%d: already taken over",
                    self.url,
                    self.epoch,
                )
            except OSError as e:
                log.warning(
                    "quiver.lease.release_failed lease=%s epoch=%d: %s; it expires %g s after "
                    "its last renewal",
                    self.url,
                    self.epoch,
                    e,
                    self.ttl_s,
                )

    def keep(self, on_lost: Callable[[LeaseLostError], None] | None = None) -> LeaseKeeper:
        """Start (once) the background renewal of this lease; ``release`` stops it."""
        with self._lock:
            if self.keeper is None:
                self.keeper = LeaseKeeper(self, on_lost=on_lost)
                self.keeper.start()
            return self.keeper


def _salvage_epoch(raw: bytes) -> int:
    """The epoch a damaged lease object still shows, if its body decodes (else 0)."""
    try:
        body: Any = msgpack.unpackb(raw[16:], raw=False, strict_map_key=False)
        epoch = body.get("epoch") if isinstance(body, dict) else None
    except Exception:  # damaged bytes: anything may fail to decode
        return 0
    return epoch if isinstance(epoch, int) and 0 <= epoch < 1 << 62 else 0


def current_holder(
    objects: ObjectStore, key: str, *, clock: Clock = elapsed, stale: Stale | None = None
) -> HolderInfo | None:
    """Who holds ``key`` now, as far as this process can tell: None when it is absent,
    released, held by a dead process of this host, or seen unchanged for its ``ttl_s``
    by this process (a long-lived process notices expiry; a one-shot one reports the
    holder), or, given ``stale``, unwritten for its ttl by the storage's clock. A
    damaged lease is an unknown holder (``pid`` -1) until it expires."""
    got = objects.get(key)
    if got is None:
        return None
    try:
        body = decode_lease(objects.display(key), got.data)
    except CorruptionError:
        unknown = HolderInfo("?", -1, "", "unknown holder", "?", DEFAULT_TTL_S)
        watched = _observe(_ident(objects, key), got.version, clock)
        expired = watched >= DEFAULT_TTL_S or (stale is not None and stale(got, DEFAULT_TTL_S))
        return None if expired else unknown
    if body.released or body.holder.dead_here():
        return None
    watched = _observe(_ident(objects, key), got.version, clock)
    ttl = body.holder.ttl_s
    return None if watched >= ttl or (stale is not None and stale(got, ttl)) else body.holder


def stored_epoch(objects: ObjectStore, key: str) -> int:
    """The epoch the lease object ``key`` records (one GET): 0 when it is absent or
    cannot be decoded. What a MANIFEST written from a listing is fenced at, whoever
    writes it (§16.2): never below the partition's newest holder."""
    got = objects.get(key)
    if got is None:
        return 0
    try:
        return decode_lease(objects.display(key), got.data).epoch
    except CorruptionError:
        return 0
