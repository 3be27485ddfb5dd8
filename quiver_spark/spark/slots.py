"""Core slots: the store partitions a Spark executor writes into.

A Python worker runs one task at a time and is reused for later tasks, so each
worker process claims one store partition ("core slot") per store the first time it
writes there and keeps it open: ``<host>-0``, ``<host>-1``, ... taking the first whose
single-writer lock is free. A stream with 200 Spark partitions on 8 cores thus fills
about 8 store partitions, and no task waits for another task's lock. The open
store's maintenance thread seals committed data once ``segment.max_open_duration``
old. Handles are closed at interpreter exit; a worker killed instead (PySpark's
daemon ends workers with ``os._exit`` or SIGKILL) leaves a durable WAL that the next
claimant of the slot, or the driver after its next commit, recovers. A slot whose
partition cannot be recovered (damage that ``quiver fsck`` names) is skipped, so one
damaged partition never stops a host's writers.

On an object root (the caller passes the root's :class:`ObjectStore`; None or a POSIX
root keeps the ``flock``) a slot is claimed by the lease ``partitions/<host>-<k>/LEASE``
(ARCHITECTURE.md §12.3): :func:`claim_slot_lease` takes it, renews it in the background
and parks it for the partition writer, which adopts it
(:func:`~quiver_spark.control.lease.adopt`) and writes under its epoch. A slot whose
holder is a dead process of this host is claimed at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import threading

from ..config import StoreConfig
from ..control.lease import DEFAULT_TTL_S, Lease, adopt, hand_over, needs_lease
from ..errors import CorruptionError, LockedError, StoreClosedError, WalFailedError
from ..objects.base import ObjectStore
from ..store import QuiverStore

log = logging.getLogger(__name__)

MAX_SLOTS = 4096
"""Upper bound on slot numbers tried on one host before giving up."""

_lock = threading.Lock()
_handles: dict[tuple[str, StoreConfig], QuiverStore] = {}
_leases: dict[tuple[str, StoreConfig], tuple[ObjectStore, str]] = {}  # slot lease keys
_owner_pid = os.getpid()
_atexit_registered = False


def host_tag(hostname: str | None = None) -> str:
    """The host part of a slot name, restricted to ``[A-Za-z0-9_.-]`` (max 48 chars).

    >>> host_tag("worker 7.example.com")
    'worker_7.example.com'
    """
    raw = hostname if hostname is not None else socket.gethostname()
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:48].strip(".") or "host"
    return tag


SLOT_LEASE_TTL_S = DEFAULT_TTL_S
"""A slot's lease expires this long after its last renewal (object roots)."""


def slot_lease_key(host: str, k: int) -> str:
    """``partitions/<host>-<k>/LEASE``: the writer lease of slot ``k`` of ``host``."""
    return f"partitions/{host}-{k}/LEASE"


def claim_slot_lease(objects: ObjectStore, host: str, k: int) -> Lease:
    """Hold slot ``<host>-<k>``'s writer lease, without waiting, and keep it renewed;
    :class:`LockedError` when another writer holds it. The caller hands it to the
    partition writer (:func:`~quiver_spark.control.lease.hand_over`) or releases it."""
    lease = Lease.acquire(
        objects, slot_lease_key(host, k), purpose="writer", ttl_s=SLOT_LEASE_TTL_S
    )
    lease.keep()
    return lease


def slot_store(root: str, config: StoreConfig, objects: ObjectStore | None = None) -> QuiverStore:
    """This process's open store partition for ``(root, config)``, claiming one if needed
    (on an object root ``objects``, by its slot lease)."""
    global _owner_pid, _atexit_registered
    key = (root, config)
    with _lock:
        if _owner_pid != os.getpid():  # a forked child never owns its parent's locks
            _handles.clear()
            _leases.clear()
            _owner_pid = os.getpid()
        store = _handles.get(key)
        if store is not None:
            return store
        host = host_tag()
        if needs_lease(objects):
            assert objects is not None
            pid, store = _open_object_slot(root, config, objects, host)
            _leases[key] = (objects, slot_lease_key(host, int(pid.rsplit("-", 1)[1])))
        else:
            for k in range(MAX_SLOTS):
                pid = f"{host}-{k}"
                try:
                    store = QuiverStore.open(root, config, partition=pid)
                except LockedError:
                    continue
                except CorruptionError as e:
                    # a damaged slot stays for ``quiver fsck``; the worker writes elsewhere
                    log.error("quiver.sink.slot_damaged root=%s partition=%s: %s", root, pid, e)
                    continue
                break
            else:
                raise LockedError(
                    os.path.join(root, f"{host}-*"), f"other writers on all {MAX_SLOTS} slots"
                )
        _handles[key] = store
        if not _atexit_registered:
            atexit.register(close_all)
            _atexit_registered = True
        rec = store.recovery
        log.info(
            "quiver.sink.slot root=%s partition=%s process=%d recovered=%s",
            root,
            pid,
            os.getpid(),
            rec.summary() if rec is not None and rec.records_scanned else "nothing",
        )
        return store


def _open_object_slot(
    root: str, config: StoreConfig, objects: ObjectStore, host: str
) -> tuple[str, QuiverStore]:
    """The first slot of ``host`` whose lease is free, opened (its writer adopts it)."""
    for k in range(MAX_SLOTS):
        pid = f"{host}-{k}"
        try:
            lease = claim_slot_lease(objects, host, k)
        except LockedError:
            continue
        hand_over(lease)
        try:
            store = QuiverStore.open(root, config, partition=pid)
        except LockedError:
            _unclaim(objects, lease.key)
            continue
        except CorruptionError as e:
            log.error("quiver.sink.slot_damaged root=%s partition=%s: %s", root, pid, e)
            _unclaim(objects, lease.key)
            continue
        except BaseException:
            _unclaim(objects, lease.key)
            raise
        return pid, store
    raise LockedError(
        objects.display(f"partitions/{host}-*"), f"other writers on all {MAX_SLOTS} slots"
    )


def _unclaim(objects: ObjectStore, key: str) -> None:
    """Release a slot lease no writer adopted (a writer releases its own)."""
    lease = adopt(objects, key)
    if lease is not None:
        lease.release()


def evict(root: str, config: StoreConfig, exc: BaseException | None = None) -> None:
    """Drop (and close) a cached handle after it failed, so the next task reopens it."""
    with _lock:
        store = _handles.pop((root, config), None)
        claimed = _leases.pop((root, config), None)
    if store is None:
        return
    log.warning("quiver.sink.slot_evict root=%s error=%r", root, exc)
    try:
        store.close()
    except (WalFailedError, StoreClosedError, OSError) as e:
        log.warning("quiver.sink.slot_close_failed root=%s error=%r", root, e)
    finally:
        if claimed is not None:
            _unclaim(*claimed)


def close_all() -> None:
    """Close every cached handle (seal committed data, release locks); idempotent."""
    with _lock:
        stores = list(_handles.values())
        _handles.clear()
        claimed = list(_leases.values())
        _leases.clear()
    for store in stores:
        try:
            store.close()
        except Exception as e:  # at exit: report, and let the WAL recovery cover it
            log.warning("quiver.sink.slot_close_failed root=%s error=%r", store.root, e)
    for objects, key in claimed:
        _unclaim(objects, key)


def open_slots() -> list[tuple[str, str]]:
    """``(root, partition)`` of this process's open slots (for tests and status)."""
    with _lock:
        return [(s.root, s.writer.pid) for s in _handles.values() if s.writer is not None]
