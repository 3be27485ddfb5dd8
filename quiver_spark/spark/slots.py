"""Core slots: the store partitions a Spark executor writes into.

A Python worker runs one task at a time and is reused for later tasks, so each
worker process claims one store partition ("core slot") per store the first time it
writes there and keeps it open, taking the lowest-numbered slot whose single-writer
lock is free (:meth:`~quiver_spark.store.QuiverStore.open_slot`). A stream with 200
Spark partitions on 8 cores thus fills about 8 store partitions, and no task waits
for another task's lock. The open store's maintenance thread seals committed data
once ``segment.max_open_duration`` old. Handles are closed at interpreter exit; a
worker killed instead (PySpark's daemon ends workers with ``os._exit`` or SIGKILL)
leaves a durable WAL that the next claimant of the slot, or the driver after its next
commit, recovers. A slot whose partition cannot be recovered (damage that ``quiver
fsck`` names) is skipped, so one damaged partition never stops a host's writers.

On a POSIX root the slots of a host are ``<host>-0``, ``<host>-1``, ... (their WALs
are under the root, or on that host's own disk). On an object root they are a pool
every machine shares, ``w-0``, ``w-1``, ... (ARCHITECTURE.md §8.2, "Slots"): the
lock of a slot is its lease ``partitions/w-<k>/LEASE``, and a worker takes the
lowest-numbered slot whose lease is free (never taken, released, its holder a dead
process of this host, or unwritten for its ttl by the storage's clock), so a new
executor (a new pod, a new host name) takes over a slot a gone one left instead of
adding a partition: the store holds about as many partitions as writers ever ran at
once. A held lease is skipped the same way as a held ``flock``. A cached slot whose
lease another holder took over (the worker was paused past the lease's ttl, and an
observer sealed the slot or a claimant took it) is of no more use to its process: a
task that finds it so before writing (the lease's renewal found it lost, or no renewal
has landed for half its ttl and one now finds it lost) drops it and claims a slot
afresh, and a task that meets the loss while writing (``LeaseLostError``, its
``FencedError``) drops it and fails; Spark's retry or the next batch writes its rows.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import threading

from ..errors import QuiverError
from ..store import QuiverStore, StoreConfig

log = logging.getLogger(__name__)

_lock = threading.Lock()
Key = tuple[str, StoreConfig, tuple[tuple[str, str], ...]]
_handles: dict[Key, QuiverStore] = {}
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


def _key(root: str, config: StoreConfig, storage_options: dict[str, str] | None) -> Key:
    return (root, config, tuple(sorted((storage_options or {}).items())))


def slot_store(
    root: str, config: StoreConfig, storage_options: dict[str, str] | None = None
) -> QuiverStore:
    """This process's open store partition for ``(root, config)``, claiming one if needed
    (``storage_options``: an object root's client settings)."""
    global _owner_pid, _atexit_registered
    key = _key(root, config, storage_options)
    with _lock:
        if _owner_pid != os.getpid():  # a forked child never owns its parent's locks
            _handles.clear()
            _owner_pid = os.getpid()
        store = _handles.get(key)
        if store is not None:
            if store.holds_partition():
                return store
            del _handles[key]
            _close(store, root, "its lease was taken over")
        store = QuiverStore.open_slot(
            root, config, host=host_tag(), storage_options=storage_options or None
        )
        _handles[key] = store
        if not _atexit_registered:
            atexit.register(close_all)
            _atexit_registered = True
        rec = store.recovery
        log.info(
            "quiver.sink.slot root=%s partition=%s process=%d recovered=%s",
            root,
            store.slot,
            os.getpid(),
            rec.summary() if rec is not None and rec.records_scanned else "nothing",
        )
        return store


def _close(store: QuiverStore, root: str, why: object) -> None:
    """Close a handle dropped from the cache; a failure is logged, never raised."""
    pid = store.slot
    log.warning("quiver.sink.slot_evict root=%s partition=%s error=%r", root, pid, why)
    try:
        store.close()
    except (QuiverError, OSError) as e:
        log.warning("quiver.sink.slot_close_failed root=%s partition=%s error=%r", root, pid, e)


def evict(
    root: str,
    config: StoreConfig,
    exc: BaseException | None = None,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Drop (and close) a cached handle after it failed, so the next task claims a
    slot afresh (the same one, recovered, unless another holder took it over).

    A close that fails is logged, never raised: a slot whose lease was lost raises
    there too (it may not seal anything: its successor fences it), and whatever its
    WAL holds is recovered by the slot's next holder."""
    with _lock:
        store = _handles.pop(_key(root, config, storage_options), None)
    if store is not None:
        _close(store, root, exc)


def close_all() -> None:
    """Close every cached handle (seal committed data, release locks); idempotent."""
    with _lock:
        stores = list(_handles.values())
        _handles.clear()
    for store in stores:
        try:
            store.close()
        except Exception as e:  # at exit: report, and let the WAL recovery cover it
            log.warning("quiver.sink.slot_close_failed root=%s error=%r", store.root, e)


def open_slots() -> list[tuple[str, str]]:
    """``(root, partition)`` of this process's open slots (for tests and status)."""
    with _lock:
        return [(s.root, s.slot) for s in _handles.values() if s.slot is not None]
