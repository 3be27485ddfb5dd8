"""The one read-change-write loop over a control object (ARCHITECTURE.md §2.3).

Every control object that several processes change (a MANIFEST, its GONE copy, a
subscriber record, STORE, POLICY and its copy, CHECKPOINT, a reader's data-loss note, a
holder's lease at its renewal) is changed the same way, by :func:`update`:

1. read the key: its bytes and version, or absent;
2. ``change(current)`` gives the new value, or None: nothing to write (done);
3. ``fence()``, when given, raises if this writer may no longer write (its lease
   moved): a holder that lost its lease never writes;
4. write conditionally: ``create`` when the read found nothing, else ``replace`` at
   the version read;
5. a lost condition (``ObjectExists``, ``VersionMismatch``) or a 409
   (``ObjectConflict``: nothing written) means another write came first: read again
   and run ``change`` again, on what that write left, after a jittered pause from the
   second loss on; at most :data:`ATTEMPTS` writes, then an ``OSError`` naming the key.

Any other failure of the write (but ``RequestRejected``: not carried out) leaves its
outcome unknown. The store's own retry (:mod:`~quiver_spark.objects.retry`) has already
read the key back and counted a key holding exactly the bytes written as written; what
reaches this loop is still unknown: with ``resolve`` the caller tells (a token in the
bytes), otherwise the failure is raised and the caller's next call reads again.
``change`` must be a pure function of what it is given (it runs once per attempt).

Who fences: a write that must be refused once its writer's lease moved passes
``fence`` (the MANIFEST, written by the partition's lease holder). The other keys are
joins or monotone and correct from any writer at any time: GONE only gains facts, a
CHECKPOINT generation only grows, a data-loss note only gains lines, a subscriber
record's change is computed from the record read, STORE's schema is recorded once,
POLICY's generation only grows, and a lease renewal is conditional on the lease's own
version (its fence is the condition itself, §8.2).

Rejected: one loop per call site (twelve copies had drifted to bounds from 3 to 64
and three ways of treating a 409); a lock object per key (a holder that dies keeps
it until a ttl, and the conditional write already serializes the writers).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..errors import LostRaceError, ObjectConflict, PreconditionFailed, RequestRejected
from ..objects.base import ObjectStore, Stored

T = TypeVar("T")

ATTEMPTS = 32
"""Conditional writes of one key lost in a row before :func:`update` gives up. Each
loss means another write of the key landed (progress elsewhere), so the bound only
stops a writer that never wins; a site whose message says so tells the user to retry."""

PAUSE_FIRST_S = 0.005
PAUSE_MAX_S = 0.2
"""The pause after the ``n``-th loss in a row (``n`` >= 2) is uniform in
``[0, min(PAUSE_MAX_S, PAUSE_FIRST_S * 2**n)]``: writers racing on one key spread out."""


@dataclass(frozen=True)
class Current(Generic[T]):
    """What a read found: ``value`` (None when the key is absent, or its bytes are
    damaged and the caller writes over them) and ``version``, the version the write
    is conditional on (None: absent, so the write creates)."""

    value: T | None
    version: str | None


@dataclass(frozen=True)
class Written(Generic[T]):
    """What :func:`update` wrote: the new value and the version the storage gave it."""

    value: T
    version: str


def read_key(objects: ObjectStore, key: str, decode: Callable[[Stored], T | None]) -> Current[T]:
    """``key`` as stored now (one GET), its bytes through ``decode``."""
    got = objects.get(key)
    if got is None:
        return Current(None, None)
    return Current(decode(got), got.version)


def pause(lost: int, sleep: Callable[[float], None] = time.sleep) -> None:
    """The jittered pause after ``lost`` conditional writes lost in a row (none after
    the first)."""
    if lost > 1:
        sleep(random.uniform(0, min(PAUSE_MAX_S, PAUSE_FIRST_S * 2**lost)))


def update(
    objects: ObjectStore,
    key: str,
    change: Callable[[T | None], T | None],
    *,
    encode: Callable[[T], bytes],
    decode: Callable[[Stored], T | None] | None = None,
    read: Callable[[], Current[T]] | None = None,
    fence: Callable[[], None] | None = None,
    lost: Callable[[], object] | None = None,
    give_up: Callable[[int], BaseException] | None = None,
    resolve: Callable[[], str | None] | None = None,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> Written[T] | None:
    """Change ``key`` as the module docstring says; what was written, or None when
    ``change`` returned None (nothing was written).

    ``decode`` turns the bytes read into a value (it may return None for bytes it
    writes over, or raise to stop); ``read``, instead of ``decode``, reads the key
    itself (a cached copy first, say). ``fence`` runs before every write and raises to
    stop it. ``lost`` runs after each lost write and before any other failure of the
    write propagates (a cache of the key is dropped there). ``give_up(attempts)``
    makes the error raised once ``attempts`` writes were lost (default: an
    ``OSError`` naming the key). ``resolve()`` resolves a write of unknown outcome the
    caller's way (a token in the bytes): the version when the write landed, None when
    it did not (the failure is then raised).
    """
    if read is None:
        if decode is None:
            raise TypeError("update needs decode or read")
        dec = decode

        def read() -> Current[T]:
            return read_key(objects, key, dec)

    for n in range(1, attempts + 1):
        cur = read()
        new = change(cur.value)
        if new is None:
            return None
        data = encode(new)
        if fence is not None:
            fence()
        try:
            if cur.version is None:
                version = objects.create(key, data)
            else:
                version = objects.replace(key, data, version=cur.version)
        except (PreconditionFailed, ObjectConflict):
            if lost is not None:
                lost()
            if n < attempts:
                pause(n, sleep)
            continue
        except OSError as e:
            if lost is not None:
                lost()
            if isinstance(e, RequestRejected):
                raise  # not carried out: nothing to resolve
            if resolve is None:
                raise
            landed = resolve()
            if landed is None:
                raise
            version = landed
        except BaseException:
            if lost is not None:
                lost()
            raise
        return Written(new, version)
    if give_up is not None:
        raise give_up(attempts)
    shown = objects.display(key)
    raise LostRaceError(
        shown, f"{shown}: {attempts} conditional writes in a row lost", attempts=attempts
    )
