"""One live consumer per subscriber: the lock ``<root>/readers/<subscriber>.lock`` (§9b).

A consumer (a :class:`~quiver_spark.subscription.Subscription` opened ``live``) holds
the lock while it is open. A second live consumer of the subscriber is refused,
whether it is in another process (the ``flock``) or in this one (a holder that is
still reachable); a holder of this process dropped without closing (a replaced
reader: an object nobody references any more) has ended, so its lock is taken over.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ..errors import LockedError, SubscriberError
from ..format import READERS_DIR
from ..fs import PartitionLock, partition_locked

LIVE_PURPOSE = "live consumer"
"""How a live-consumer lock names its holder's role (``readers/<subscriber>.lock``)."""


@dataclass
class _LiveHolder:
    owner: weakref.ReferenceType[Any]  # the consumer; dead once it is garbage
    lock: PartitionLock


_live_mutex = threading.Lock()
_live: dict[str, _LiveHolder] = {}  # real lock path -> this process's holder


def live_lock_path(root: str, subscriber: str) -> str:
    """``<root>/readers/<subscriber>.lock``: held by the subscriber's live consumer."""
    return os.path.join(root, READERS_DIR, f"{subscriber}.lock")


def is_live(root: str, subscriber: str) -> bool:
    """True while a consumer (of any process) holds ``subscriber``'s live-consumer lock."""
    return partition_locked(live_lock_path(root, subscriber))


def _holder_of(path: str) -> str:
    """What the lock file says of its holder: ``pid N on HOST (ROLE since T)``."""
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read(4096).decode() or "{}")
        return (
            f"pid {info.get('pid', '?')} on {info.get('host', '?')} "
            f"({info.get('purpose', LIVE_PURPOSE)} since {info.get('since', '?')})"
        )
    except (OSError, ValueError):
        return "a consumer whose lock file cannot be read"


def _refusal(subscriber: str, path: str, holder: str) -> SubscriberError:
    return SubscriberError(
        f"subscriber {subscriber!r} already has a live consumer: its live-consumer lock "
        f"{path} is held by {holder}; a subscriber has one live consumer at a time: stop "
        "that query or process (or close() that Subscription), or give this consumer its "
        "own subscriber id (option('subscriber', ...))"
    )


def claim_live(root: str, subscriber: str, owner: object) -> None:
    """Hold ``<root>/readers/<subscriber>.lock`` for consumer ``owner`` (see the module
    docstring for who is refused and whose lock is taken over)."""
    path = live_lock_path(root, subscriber)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    key = os.path.realpath(path)
    with _live_mutex:
        held = _live.get(key)
        if held is not None and held.owner() is not None:
            gc.collect()  # a dropped holder caught in a reference cycle is freed here
        if held is not None:
            if held.owner() is not None:
                raise _refusal(subscriber, path, f"{_holder_of(path)}, in this process")
            _live[key] = _LiveHolder(weakref.ref(owner), held.lock)
            return
        try:
            lock = PartitionLock.acquire(path, purpose=LIVE_PURPOSE)
        except LockedError as e:  # the holder says all; the flock's own error is noise
            raise _refusal(subscriber, path, e.holder) from None
        _live[key] = _LiveHolder(weakref.ref(owner), lock)


def release_live(root: str, subscriber: str, owner: object) -> None:
    """Release the subscriber's live-consumer lock if ``owner`` holds it."""
    key = os.path.realpath(live_lock_path(root, subscriber))
    with _live_mutex:
        held = _live.get(key)
        if held is not None and held.owner() is owner:
            del _live[key]
            held.lock.release()
