"""One live consumer per subscriber: the lock ``<root>/readers/<subscriber>.lock`` (§18),
on an object root the lease ``readers/<subscriber>.lease`` (§8.2).

A consumer (a :class:`~quiver_spark.subscription.Subscription` opened ``live``) holds
the lock while it is open. A second live consumer of the subscriber is refused,
whether it is in another process (the ``flock``, or the lease) or in this one (a holder
that is still reachable); a holder of this process dropped without closing (a replaced
reader: an object nobody references any more) has ended, so its lock is taken over.

The root's kind builds its locks: :class:`FlockLive` on a POSIX root, :class:`LeaseLive`
on an object root, whose lease is renewed in the background every ``ttl / 3``. A claim
waits up to the ttl plus :data:`LIVE_LEASE_WAIT_MARGIN_S` for a holder that stopped
renewing (a consumer that died on another host) and is refused as soon as the holder is seen
renewing, or at once when the holder is a live process of this host.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import layout
from ..control.lease import DEFAULT_TTL_S, Lease, current_holder
from ..errors import LeaseLostError, LockedError, SubscriberError
from ..fs import PartitionLock, partition_locked
from ..objects.base import ObjectStore

log = logging.getLogger(__name__)

live_lease_key = layout.live_lease
"""``readers/<subscriber>.lease``: the live-consumer lease (the layout module builds it)."""

LIVE_PURPOSE = "live consumer"
"""How a live-consumer lock names its holder's role (``readers/<subscriber>.lock``)."""

LIVE_LEASE_WAIT_MARGIN_S = 2.0
"""A claim waits the lease's ttl plus this long for a holder that stopped renewing
(then takes it over); the ttl is the store option ``lease.ttl``."""


@dataclass
class _LiveHolder:
    owner: weakref.ReferenceType[Any]  # the consumer; dead once it is garbage
    lock: PartitionLock | Lease


@dataclass(frozen=True)
class LiveClaim:
    """Who a live consumer on an object root is, as its acknowledgements say it to the
    ack log (§13.7): the token of its lease (one per acquisition) and, for messages,
    the lease and its epoch."""

    token: int
    url: str
    epoch: int

    def refused(self, subscriber: str) -> LeaseLostError:
        """The error of an acknowledgement the ack log refuses: a later consumer
        claimed ``subscriber`` (its claim stands later in the log than ours)."""
        return LeaseLostError(
            self.url,
            self.epoch,
            None,
            f"the ack log names another live consumer of subscriber {subscriber!r} "
            "(a later one claimed it, or it was registered again since this consumer "
            "claimed it); nothing of this call was recorded",
        )


_live_mutex = threading.Lock()
_live: dict[str, _LiveHolder] = {}  # real lock path -> this process's holder


def live_lock_path(root: str, subscriber: str) -> str:
    """``<root>/readers/<subscriber>.lock``: held by the subscriber's live consumer."""
    return os.path.join(root, layout.live_lock(subscriber))


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


def _refusal(subscriber: str, path: str, holder: str, what: str = "lock") -> SubscriberError:
    return SubscriberError(
        f"subscriber {subscriber!r} already has a live consumer: its live-consumer {what} "
        f"{path} is held by {holder}; a subscriber has one live consumer at a time: stop "
        "that query or process (or close() that Subscription), or give this consumer its "
        "own subscriber id (option('subscriber', ...))"
    )


class LiveLocks(Protocol):
    """A root's live-consumer locks, as its kind builds them (:mod:`quiver_spark.root_kind`):
    :class:`FlockLive` or :class:`LeaseLive`."""

    def claim(
        self,
        subscriber: str,
        owner: object,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        floor: Callable[[], int] | None = None,
    ) -> None:
        """Hold ``subscriber``'s live-consumer lock for consumer ``owner``, or raise
        SubscriberError naming the live consumer that holds it."""

    def release(self, subscriber: str, owner: object) -> None:
        """Release the subscriber's live-consumer lock if ``owner`` holds it."""

    def is_live(self, subscriber: str) -> bool:
        """True while a consumer (of any process) holds ``subscriber``'s lock."""

    def check(self, subscriber: str, owner: object) -> None:
        """Raise when ``owner``'s lock was taken over."""

    def claim_of(self, subscriber: str, owner: object) -> LiveClaim | None:
        """What ``owner``'s acknowledgements carry of its claim; None when nothing
        needs to (a lock nobody takes over)."""

    def started_past_the_log(self, subscriber: str) -> bool:
        """Whether a consumer may have started since the ack log's last decision."""


class FlockLive:
    """A POSIX root's live-consumer locks: the ``flock`` on
    ``<root>/readers/<subscriber>.lock``, which excludes a consumer of any process."""

    def __init__(self, root: str) -> None:
        self.root = root

    def claim(
        self,
        subscriber: str,
        owner: object,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        floor: Callable[[], int] | None = None,
    ) -> None:
        """Hold ``<root>/readers/<subscriber>.lock`` for consumer ``owner`` (see the
        module docstring for who is refused and whose lock is taken over). A flock has
        no epoch: ``floor`` is not asked."""
        path = live_lock_path(self.root, subscriber)
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

    def release(self, subscriber: str, owner: object) -> None:
        """Release the subscriber's live-consumer lock if ``owner`` holds it."""
        _release(os.path.realpath(live_lock_path(self.root, subscriber)), owner)

    def is_live(self, subscriber: str) -> bool:
        """True while a consumer (of any process) holds ``subscriber``'s lock."""
        return partition_locked(live_lock_path(self.root, subscriber))

    def check(self, subscriber: str, owner: object) -> None:
        """A flock is never taken over: nothing to raise."""
        return None

    def claim_of(self, subscriber: str, owner: object) -> LiveClaim | None:
        """None: the ``flock`` excludes a second consumer."""
        return None

    def started_past_the_log(self, subscriber: str) -> bool:
        """False: a consumer's start takes the ack log's lock, so one held since a
        decision keeps every start out."""
        return False


class LeaseLive:
    """An object root's live-consumer locks: the lease ``readers/<subscriber>.lease``
    (§8.2), renewed in the background, whose claim the acknowledgements carry."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    def claim(
        self,
        subscriber: str,
        owner: object,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        floor: Callable[[], int] | None = None,
    ) -> None:
        """Hold the lease ``readers/<subscriber>.lease`` for consumer ``owner`` (see the
        module docstring). ``floor``: asked for the epoch of the subscriber's standing
        claim in the ack log (§13.7), so a lease object that went missing or was
        damaged never restarts below it."""
        min_epoch = floor() if floor is not None else 0
        _claim_lease(self.objects, subscriber, owner, ttl_s, min_epoch)

    def release(self, subscriber: str, owner: object) -> None:
        """Release the subscriber's live-consumer lease if ``owner`` holds it."""
        _release(self.objects.display(layout.live_lease(subscriber)), owner)

    def is_live(self, subscriber: str) -> bool:
        """True while a consumer holds ``subscriber``'s lease, as far as this process
        can tell (§8.2)."""
        return current_holder(self.objects, layout.live_lease(subscriber)) is not None

    def check(self, subscriber: str, owner: object) -> None:
        """Raise :class:`LeaseLostError` when ``owner``'s live-consumer lease was taken
        over (another consumer is live now: this one must stop acknowledging)."""
        with _live_mutex:
            held = _live.get(self.objects.display(layout.live_lease(subscriber)))
        if held is None or held.owner() is not owner or not isinstance(held.lock, Lease):
            return
        lease = held.lock
        # lost: raised; paused past half its ttl: renewed first, so it acts only while
        # the lease is still ours (§8.2)
        lease.check_held()

    def claim_of(self, subscriber: str, owner: object) -> LiveClaim:
        """``owner``'s claim as the live consumer of ``subscriber``. Raises
        LeaseLostError when ``owner`` holds the subscriber's lease no more (it was
        taken over, and perhaps handed to a newer consumer of this process, or
        released)."""
        url = self.objects.display(layout.live_lease(subscriber))
        with _live_mutex:
            held = _live.get(url)
        if held is None or held.owner() is not owner or not isinstance(held.lock, Lease):
            raise LeaseLostError(
                url,
                held.lock.epoch if held is not None and isinstance(held.lock, Lease) else 0,
                None,
                "this consumer holds it no more (it was taken over or released; a newer "
                "consumer may hold it now)",
            )
        lease = held.lock
        return LiveClaim(int(lease.holder.token[:16], 16), lease.url, lease.epoch)

    def started_past_the_log(self, subscriber: str) -> bool:
        """Whether a consumer holds ``subscriber``'s lease now: a start on an object
        root takes no lock of the ack log, so one made since a decision is looked for
        here (:meth:`is_live`)."""
        return self.is_live(subscriber)


def _claim_lease(
    objects: ObjectStore, subscriber: str, owner: object, ttl_s: float, min_epoch: int
) -> None:
    key = layout.live_lease(subscriber)
    url = objects.display(key)
    with _live_mutex:
        held = _live.get(url)
        if held is not None and held.owner() is not None:
            gc.collect()
        if held is not None:
            if held.owner() is not None and not _lease_lost(held.lock):
                assert isinstance(held.lock, Lease)
                who = f"{held.lock.holder.describe()}, in this process"
                raise _refusal(subscriber, url, who, "lease")
            if not _lease_lost(held.lock):  # a dropped consumer's lease: the next one's
                _live[url] = _LiveHolder(weakref.ref(owner), held.lock)
                return
            del _live[url]
    try:  # the wait happens outside the mutex: other subscribers are not held up
        lease = Lease.acquire(
            objects,
            key,
            purpose=LIVE_PURPOSE,
            ttl_s=ttl_s,
            wait_s=ttl_s + LIVE_LEASE_WAIT_MARGIN_S,
            stop_when_renewed=True,
            min_epoch=min_epoch,
        )
    except LockedError as e:
        raise _refusal(subscriber, url, e.holder, "lease") from None
    lease.keep(
        on_lost=lambda e: log.error("quiver.subscriber.live_lease_lost %s: %s", subscriber, e)
    )
    with _live_mutex:
        _live[url] = _LiveHolder(weakref.ref(owner), lease)


def _lease_lost(lock: PartitionLock | Lease) -> bool:
    return isinstance(lock, Lease) and lock.lost()


def _release(key: str, owner: object) -> None:
    with _live_mutex:
        held = _live.get(key)
        if held is not None and held.owner() is owner:
            del _live[key]
            held.lock.release()
