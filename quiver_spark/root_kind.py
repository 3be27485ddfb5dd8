"""What a store does differently on a POSIX root and on an object root, decided once
when it opens (ARCHITECTURE.md §1, §2).

- :class:`FileRoot` (a local path or ``file://``): the WALs sit in the root's own tree
  (``<root>/partitions``), so a lost process's rows are on the shared disk, the WAL's
  flock says who writes, and ``segment.path`` may put segments elsewhere. Its control
  files are fsynced files: a commit record's name is synced before it is reported, the
  ack log is files under ``subscribers/`` with their flock, a live consumer holds a
  flock, a reader's lost-segment log is a file appended to.
- :class:`ObjectRoot` (``memory://``, ``s3://``, ``gs://``, ``az://``...): nothing is
  shared but the bucket. The WALs are on each machine's own disk; a writer holds the
  partition's LEASE in the bucket besides its flock (§8.2), stages each transaction
  before it is reported (§10.2), and any process seals a lost machine's committed
  staged rows once its LEASE is free; segments live in the bucket. Its control objects
  are durable once written: the ack log is one object per append, a live consumer
  holds a lease, a lost-segment log is an object rewritten whole.

Each kind builds the parts that differ (:meth:`RootKind.commit_log`,
:attr:`RootKind.journal`, :attr:`RootKind.live`, :meth:`RootKind.segment_location`,
:meth:`RootKind.lost_log`), and :func:`root_kind` chooses the kind once, from the URL:
:class:`~quiver_spark.store.QuiverStore` holds one, and a process without a store (a
command, a read task on an executor) asks :func:`root_kind` for the class. Nothing else
branches on the root's kind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from . import layout
from .commits import STORED, CommitLog, SyncedNames
from .config import StoreConfig, validate_name
from .control.clock import elapsed
from .control.gone import GoneCopy
from .control.lease import PURPOSE_WRITER, Lease, Stale, current_holder
from .control.manifest_store import NO_FACTS, Facts, ManifestStore
from .dataloss import LostLog, ObjectLostLog
from .errors import (
    MAKING_A_STORE,
    ConfigError,
    CorruptionError,
    LeaseHeldError,
    LockedError,
    StoreNotFoundError,
)
from .fs import FileIO, PartitionLock, partition_locked
from .objects import ObjectStore
from .objects.base import Stored
from .objects.clock import RESOLUTION_NS, StorageClock
from .partition import PartitionWriter
from .partition.model import NO_LEASE, WriterLease
from .partition.staged_txns import LostSealer, stage_txn, staged_ids
from .segment import SegmentLocation
from .subscribers.journal import FileJournal
from .subscribers.live import FlockLive, LeaseLive, LiveLocks
from .subscribers.objects_journal import ObjectJournal
from .subscribers.registry import JournalKind
from .urls import is_object_root

log = logging.getLogger(__name__)

IDLE_RETENTION_PERIOD_S = 60.0
"""On an object root, how often a writer's maintenance runs a retention pass with
nothing new of its own (no finalize) while it is not throttled (ARCHITECTURE.md §15.1):
every pass is requests (about a dozen: the ack log, the records, the next-seq reads,
the metrics file). Nothing waits on this pass: the writer that adds bytes runs one
after each finalize (the size cap), a subscription after each acknowledgement (what
it frees), and the time and expiry bounds are hours; a throttled writer keeps the
short period so room is seen as soon as it is made."""


MAX_SLOTS = 4096
"""Upper bound on the slot numbers a claim tries before giving up (§8.2, "Slots")."""


def default_wal_root(root: str) -> str:
    """Where the WAL of a store on an object store lives when ``wal.path`` is not given:
    ``$XDG_CACHE_HOME/quiver-spark/wal/<16 hex of sha256(root URL)>`` (``~/.cache`` when
    unset), on this machine's disk (ARCHITECTURE.md §2): the same directory for every
    process of this host that writes the store, so a restarted writer recovers it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(root.encode()).hexdigest()[:16]
    return os.path.join(base, layout.machine_wal_root(digest))


def before_store(name: str) -> bool:
    """Whether ``name``, in a POSIX root without STORE, is what a creation writes before
    its STORE (ARCHITECTURE.md §7.1: POLICY, POLICY.copy, their temporary files, the
    directory's lock): such a root is no store yet, and a creation may make one there."""
    return layout.written_before_store(name)


@dataclass(frozen=True)
class StoreParts:
    """What a root kind acts on: the open store's parts, built before it is chosen."""

    root: str
    config: StoreConfig
    objects: ObjectStore
    manifests: ManifestStore
    commits: CommitLog
    segments: SegmentLocation
    lease_clock: Callable[[], Callable[[], float]]
    """The store's lease clock as it is now (a test may replace it on the store)."""


class RootKind(Protocol):
    """The decisions that differ between the two kinds of root."""

    journal: JournalKind
    """The ack log the root keeps (§13.5, §13.7): the registry is handed it."""

    live: LiveLocks
    """The live-consumer locks of the store (§18, §8.2): :meth:`live_locks` of its parts."""

    @staticmethod
    def live_locks(root: str, objects: ObjectStore) -> LiveLocks:
        """The live-consumer locks of the root (§18, §8.2)."""

    @staticmethod
    def commit_log(
        root: str, objects: ObjectStore, io: FileIO, store: str | None = None
    ) -> CommitLog:
        """The root's commit records (§10), with how it makes one durable (§10.1)."""

    @staticmethod
    def segment_location(
        url: str,
        objects: ObjectStore,
        *,
        io: FileIO,
        storage_options: dict[str, Any] | None,
        manifests: ManifestStore,
    ) -> SegmentLocation:
        """The store's segments: at ``url`` (the recorded location), or in the root's
        own objects, where the MANIFEST publishes (§11.3)."""

    @staticmethod
    def read_location(
        url: str, objects: ObjectStore, *, io: FileIO, storage_options: dict[str, Any] | None
    ) -> SegmentLocation:
        """The segments as a reader without the store opens them (an executor serving a
        read task): the same place, no MANIFEST read or written."""

    @staticmethod
    def manifest_facts(objects: ObjectStore) -> Facts:
        """Where the facts a listing cannot tell are kept besides each MANIFEST (§11.3)."""

    @staticmethod
    def lost_log(root: str, subscriber: str | None, objects: ObjectStore, io: FileIO) -> LostLog:
        """The lost-segment log of ``subscriber``'s reader (§18)."""

    @staticmethod
    def check_segment_path(config: StoreConfig, recorded: str) -> None:
        """Refuse a ``segment.path`` this kind of root cannot use."""

    @staticmethod
    def staged_look_due(since_last: float, period: float) -> bool:
        """Whether a commit looks for lost machines' staged transactions (§10.2), its
        last look ``since_last`` seconds ago and one due every ``period``."""

    @staticmethod
    def check_writer_root(root: str) -> None:
        """Refuse a writer's root that cannot hold a store, before anything is made."""

    @staticmethod
    def check_reader_root(root: str) -> None:
        """Refuse, in one line, a reader's root that is plainly no store."""

    @staticmethod
    def check_existing_root(root: str, shown: str) -> None:
        """Refuse, in one line naming ``shown``, a root a command expects a store at
        and that plainly holds none (StoreNotFoundError); an object root is checked
        by opening it (its STORE object must exist)."""

    @staticmethod
    def check_new_root(root: str, shown: str) -> bool:
        """Whether a store may be created at ``root`` (False: one is there already);
        StoreNotFoundError naming ``shown`` when something else is."""

    @staticmethod
    def recorded_wal_path(config: StoreConfig) -> str | None:
        """The WAL root a new store records in its STORE (None: none recorded)."""

    @staticmethod
    def recorded_wal(root: str, descriptor: dict[str, Any]) -> tuple[str, str | None] | None:
        """``(where, recorded)``: the WAL root an explicit ``wal.path`` must match and
        the STORE's record of it (None: under the root); None when anything goes."""

    def wal_root(self, config: StoreConfig) -> str:
        """Where this machine's WALs of the store live."""

    def writer_holder(self, wal_root: str, pid: str) -> str | None:
        """Who holds ``pid`` for writing (one line), None when nobody does."""

    def wal_note(self, wal_root: str) -> str | None:
        """What a command on this machine cannot see of other machines' WALs."""

    def has_registry(self) -> bool:
        """Whether a subscriber registry exists (asking creates nothing)."""

    def idle_retention_period(self, period: float, throttled: bool) -> float:
        """Seconds between a writer's retention passes with nothing new."""

    def stage(
        self, writer: PartitionWriter, txn_id: int, batches: Sequence[pa.RecordBatch] | None
    ) -> int:
        """Make ``txn_id``'s rows survive this machine (§10.2); the bytes written."""

    def writer_lease(self, pid: str, purpose: str = PURPOSE_WRITER) -> WriterLease:
        """The lease a writer of ``pid`` holds besides its WAL's flock (``purpose``:
        :data:`~quiver_spark.control.lease.PURPOSE_SEALER` for one that only seals)."""

    def slot_name(self, host: str, k: int) -> str:
        """The partition of core slot ``k`` for a writer on ``host`` (§8.2, "Slots")."""

    def slot_lease(self, pid: str) -> WriterLease:
        """What a slot claim of ``pid`` holds besides its WAL's flock; LockedError
        (never a wait) when another writer has it."""

    def hold_partition(self, pid: str, purpose: str) -> Lease | PartitionLock | None:
        """Keep ``pid``'s writers out while a maintenance step (``purpose``) changes its
        segments: its WAL's flock or its writer LEASE; None when the partition has no
        writer here to keep out. LockedError while a writer holds it."""

    def seal_lost(self, skip: set[str], failures: dict[str, str]) -> list[tuple[str, int]]:
        """Seal committed rows of partitions whose machine is gone; ``(pid, seq)``."""

    def staged(self) -> dict[str, list[int]]:
        """The staged transaction ids of every partition."""

    def note_live_writers(self, found: dict[str, dict[str, Any]]) -> None:
        """Set ``live`` in ``found`` (heartbeats by partition) by what the root says of
        writers; where it names the holder (a lease), also ``holder_pid``,
        ``holder_host`` and ``beat_is_holders`` (the heartbeat found is that holder's)."""


class FileRoot:
    """A POSIX root: the WALs sit in the root's own tree, so a lost process's rows are
    on the shared disk and its flock tells who writes."""

    journal: JournalKind = FileJournal

    @staticmethod
    def commit_log(
        root: str, objects: ObjectStore, io: FileIO, store: str | None = None
    ) -> CommitLog:
        return CommitLog(objects, store, durability=SyncedNames(root, io))

    @staticmethod
    def segment_location(
        url: str,
        objects: ObjectStore,
        *,
        io: FileIO,
        storage_options: dict[str, Any] | None,
        manifests: ManifestStore,
    ) -> SegmentLocation:
        return SegmentLocation(url, io=io, storage_options=storage_options, manifests=manifests)

    @staticmethod
    def read_location(
        url: str, objects: ObjectStore, *, io: FileIO, storage_options: dict[str, Any] | None
    ) -> SegmentLocation:
        return SegmentLocation(url, io=io, storage_options=storage_options)

    @staticmethod
    def manifest_facts(objects: ObjectStore) -> Facts:
        return NO_FACTS  # a MANIFEST rebuilt here relies on its files and the ack log

    @staticmethod
    def staged_look_due(since_last: float, period: float) -> bool:
        return False  # nothing is staged: a lost process's WAL is on the shared disk

    @staticmethod
    def lost_log(root: str, subscriber: str | None, objects: ObjectStore, io: FileIO) -> LostLog:
        return LostLog(root, subscriber, io)

    @staticmethod
    def live_locks(root: str, objects: ObjectStore) -> LiveLocks:
        return FlockLive(root)

    @staticmethod
    def check_writer_root(root: str) -> None:
        if os.path.exists(root) and not os.path.isdir(root):
            raise ConfigError(
                "path",
                root,
                "a directory (an existing Quiver store, or a new or empty one the sink "
                "creates); this path is a file",
            )

    @staticmethod
    def check_reader_root(root: str) -> None:
        if os.path.isfile(root):
            raise StoreNotFoundError(
                f"{root} is a file, not a Quiver store (a store is a directory with a "
                f"{layout.store_descriptor()} file, created by the sink's first write)"
            )
        if not os.path.isdir(root) or os.path.exists(os.path.join(root, layout.store_descriptor())):
            return
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            return  # the reader's own open reports it
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise StoreNotFoundError(
                f"{root} is not a Quiver store: it has no {layout.store_descriptor()} file but holds "
                f"{len(entries)} other entries ({shown}); point the reader at a directory "
                "written by format('quiver')"
            )

    @staticmethod
    def check_existing_root(root: str, shown: str) -> None:
        if not os.path.exists(root):
            raise StoreNotFoundError(f"{shown}: no such directory; expected a Quiver store")
        if not os.path.isdir(root):
            raise StoreNotFoundError(
                f"{shown} is a file, not a Quiver store (a store is a directory)"
            )
        if not os.path.exists(os.path.join(root, layout.store_descriptor())):
            raise StoreNotFoundError(
                f"{shown} is not a Quiver store: it has no {layout.store_descriptor()} file ({MAKING_A_STORE})"
            )

    @staticmethod
    def check_new_root(root: str, shown: str) -> bool:
        if os.path.exists(os.path.join(root, layout.store_descriptor())):
            return False
        if os.path.exists(root) and (
            not os.path.isdir(root) or not all(map(before_store, os.listdir(root)))
        ):
            raise StoreNotFoundError(
                f"{shown} exists and is not a Quiver store; --create makes a store only "
                "in a new or empty directory"
            )
        return True

    @staticmethod
    def recorded_wal_path(config: StoreConfig) -> str | None:
        return os.path.abspath(config.wal.path) if config.wal.path else None

    @staticmethod
    def recorded_wal(root: str, descriptor: dict[str, Any]) -> tuple[str, str | None] | None:
        if "wal_path" not in descriptor:  # a store from before it was recorded
            return None
        recorded = descriptor["wal_path"]
        return recorded or os.path.join(root, layout.partitions_dir()), recorded

    def __init__(self, parts: StoreParts) -> None:
        self.root = parts.root
        self.config = parts.config
        self.live = self.live_locks(parts.root, parts.objects)

    @staticmethod
    def check_segment_path(config: StoreConfig, recorded: str) -> None:
        return None

    def wal_root(self, config: StoreConfig) -> str:
        return config.wal.path or os.path.join(self.root, layout.partitions_dir())

    def has_registry(self) -> bool:
        return os.path.isdir(os.path.join(self.root, layout.subscribers_dir()))

    def idle_retention_period(self, period: float, throttled: bool) -> float:
        return period

    def stage(
        self, writer: PartitionWriter, txn_id: int, batches: Sequence[pa.RecordBatch] | None
    ) -> int:
        return 0  # the WAL is on the store's own disk

    def writer_lease(self, pid: str, purpose: str = PURPOSE_WRITER) -> WriterLease:
        return NO_LEASE  # the WAL's flock decides

    def slot_name(self, host: str, k: int) -> str:
        # one machine, or a shared file system: the host's own slots
        return layout.host_slot(host, k)

    def slot_lease(self, pid: str) -> WriterLease:
        return NO_LEASE  # the WAL's flock decides

    def hold_partition(self, pid: str, purpose: str) -> PartitionLock | None:
        lock = os.path.join(self.wal_root(self.config), layout.partition_lock(pid))
        if not os.path.isdir(os.path.dirname(lock)):
            return None  # no WAL directory: no writer of it on this disk
        return PartitionLock.acquire(lock, purpose=purpose)

    def seal_lost(self, skip: set[str], failures: dict[str, str]) -> list[tuple[str, int]]:
        return []  # a lost process's WAL is on the shared disk: finalize_idle seals it

    def staged(self) -> dict[str, list[int]]:
        return {}  # nothing is staged: the WAL is on the store's own disk

    def writer_holder(self, wal_root: str, pid: str) -> str | None:
        lock = os.path.join(wal_root, layout.partition_lock(pid))
        if not partition_locked(lock):
            return None
        try:
            with open(lock, "rb") as f:
                info = json.loads(f.read(4096).decode() or "{}")
            return (
                f"pid {info.get('pid', '?')} on {info.get('host', '?')} "
                f"since {info.get('since', '?')}"
            )
        except (OSError, ValueError):
            return "a running process"

    def wal_note(self, wal_root: str) -> str | None:
        return None  # every writer's WAL is under the root

    def note_live_writers(self, found: dict[str, dict[str, Any]]) -> None:
        return None  # the flocks said it


class ObjectRoot:
    """An object root (a bucket): nothing is shared but the bucket, so a writer holds
    the partition's LEASE there, stages each transaction before it is reported, and
    any process seals a lost machine's committed staged rows once its LEASE is free."""

    journal: JournalKind = ObjectJournal

    @staticmethod
    def commit_log(
        root: str, objects: ObjectStore, io: FileIO, store: str | None = None
    ) -> CommitLog:
        return CommitLog(objects, store, durability=STORED)

    @staticmethod
    def segment_location(
        url: str,
        objects: ObjectStore,
        *,
        io: FileIO,
        storage_options: dict[str, Any] | None,
        manifests: ManifestStore,
    ) -> SegmentLocation:
        return SegmentLocation.in_objects(
            objects, layout.segments_dir(), url=url, manifests=manifests
        )

    @staticmethod
    def read_location(
        url: str, objects: ObjectStore, *, io: FileIO, storage_options: dict[str, Any] | None
    ) -> SegmentLocation:
        return SegmentLocation.read_in_objects(objects, layout.segments_dir(), url=url)

    @staticmethod
    def manifest_facts(objects: ObjectStore) -> Facts:
        return GoneCopy(objects)  # a listing cannot tell what is gone: GONE keeps it

    @staticmethod
    def staged_look_due(since_last: float, period: float) -> bool:
        return since_last >= period

    @staticmethod
    def lost_log(root: str, subscriber: str | None, objects: ObjectStore, io: FileIO) -> LostLog:
        return ObjectLostLog(root, subscriber, objects)

    @staticmethod
    def live_locks(root: str, objects: ObjectStore) -> LiveLocks:
        return LeaseLive(objects)

    @staticmethod
    def check_writer_root(root: str) -> None:
        return None  # the bucket's own answers name what is wrong

    @staticmethod
    def check_reader_root(root: str) -> None:
        return None  # the reader's own open names a missing STORE object

    @staticmethod
    def check_existing_root(root: str, shown: str) -> None:
        return None  # opening it names a missing STORE object

    @staticmethod
    def check_new_root(root: str, shown: str) -> bool:
        return True  # created by its STORE object if absent (§2)

    @staticmethod
    def recorded_wal_path(config: StoreConfig) -> str | None:
        return None  # each machine keeps its WAL on its own disk (§2)

    @staticmethod
    def recorded_wal(root: str, descriptor: dict[str, Any]) -> tuple[str, str | None] | None:
        return None

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts
        self.live = self.live_locks(parts.root, parts.objects)
        self._storage_clock: StorageClock | None = None

    @staticmethod
    def check_segment_path(config: StoreConfig, recorded: str) -> None:
        if config.segment.path:
            raise ConfigError(
                "segment.path",
                config.segment.path,
                f"nothing: the segments of a store on an object store live in it ({recorded})",
            )

    def wal_root(self, config: StoreConfig) -> str:
        return config.wal.path or default_wal_root(self.parts.root)

    def has_registry(self) -> bool:
        return bool(self.parts.objects.list(layout.subscribers_prefix()))

    def idle_retention_period(self, period: float, throttled: bool) -> float:
        return period if throttled else max(period, IDLE_RETENTION_PERIOD_S)

    # -- a transaction survives its machine (§10.2) ------------------------------------
    def stage(
        self, writer: PartitionWriter, txn_id: int, batches: Sequence[pa.RecordBatch] | None
    ) -> int:
        return stage_txn(self.parts.objects, writer, txn_id, batches)

    # -- a partition's single writer (§8.2) ---------------------------------------------
    def writer_lease(
        self, pid: str, purpose: str = PURPOSE_WRITER, stale: Stale | None = None
    ) -> Lease:
        """The writer lease ``partitions/<pid>/LEASE`` (§8.2), kept renewed; its epoch
        is claimed in the partition's manifest, so the manifest change of any earlier
        holder fails from the first change of this one. Raises
        :class:`~quiver_spark.errors.LeaseHeldError` (a ``LockedError``) while another
        live writer holds it. ``stale``: a lease it judges expired is taken over too."""
        validate_name("partition", pid)
        try:
            current = self.parts.manifests.read(pid)
        except CorruptionError:
            current = None  # the writer rewrites it from a listing (§11.1)
        return self.claim(pid, purpose, current.epoch if current is not None else 0, elapsed, stale)

    # -- core slots: a pool of leases (§8.2, "Slots") ---------------------------------
    def slot_name(self, host: str, k: int) -> str:
        return layout.pool_slot(k)  # any machine's: a new one takes over a free slot

    def slot_lease(self, pid: str) -> Lease:
        """Claim pool slot ``pid``: its writer lease when it is free (never taken,
        released, its holder a dead process of this host, or unwritten for its ttl by
        the storage's clock: :meth:`stale`; or held under a lease this process dropped),
        taken over at a higher epoch as any writer's; LeaseHeldError at once otherwise
        (one GET: a slot another process holds costs a claim nothing more)."""
        p = self.parts
        key = layout.writer_lease(pid)
        holder = current_holder(p.objects, key, clock=p.lease_clock(), stale=self.stale)
        # a lease naming this process is the acquisition's to judge: one this process
        # dropped (its release failed) is taken at once, a live one refused (§8.2)
        if holder is not None and not holder.is_this_process():
            raise LeaseHeldError(
                p.objects.display(key),
                f"{holder.describe()}; its lease expires {holder.ttl_s:g} seconds after "
                "its last renewal",
            )
        return self.writer_lease(pid, PURPOSE_WRITER, self.stale)

    def stale(self, got: Stored, ttl_s: float) -> bool:
        """Whether the lease object ``got`` was last written at least ``ttl_s`` ago by
        the storage's clock (§16.2: its modification time against a probe's, both
        stamped by the storage, with :data:`~quiver_spark.objects.clock.RESOLUTION_NS`
        to spare): its holder may act for ``ttl_s`` after the start of its last written
        renewal, and the storage stamped that renewal no earlier. The probe
        (``partitions/CLOCK``: one PUT and one HEAD) is made when a held lease is met,
        and again before one is judged expired; a storage that keeps no modification
        times judges nothing (the lease is held)."""
        if got.modified_ns is None:
            return False
        need = int(ttl_s * 1e9) + RESOLUTION_NS
        if self._storage_clock is None:
            self._storage_clock = StorageClock(self.parts.objects, layout.slots_clock())
        clock = self._storage_clock
        try:
            if clock.now_ns() - got.modified_ns < need:
                return False
            return clock.now_ns(fresh=True) - got.modified_ns >= need
        except OSError as e:  # no clock to judge by: the lease counts as held
            log.warning("quiver.slot.clock_unknown root=%s: %s", self.parts.root, e)
            return False

    def hold_partition(self, pid: str, purpose: str) -> Lease:
        return Lease.acquire(self.parts.objects, layout.writer_lease(pid), purpose=purpose)

    def claim(
        self,
        pid: str,
        purpose: str,
        min_epoch: int,
        clock: Callable[[], float] | None = None,
        stale: Stale | None = None,
    ) -> Lease:
        """Take ``pid``'s writer LEASE for ``purpose`` (a writer, or a sealer of a lost
        machine's staged rows) above ``min_epoch``, keep it renewed and claim its epoch
        in the partition's MANIFEST: the one way any holder comes to change a partition
        (§8.2, §16.2). LeaseHeldError while another live holder has it. ``clock``:
        what the holder observes others' leases by (default: the store's); ``stale``:
        a judge of expiry by the storage's clock besides (a slot claim)."""
        p = self.parts
        lease = Lease.acquire(
            p.objects,
            layout.writer_lease(pid),
            purpose=purpose,
            ttl_s=p.config.lease_ttl_s,
            min_epoch=min_epoch,
            clock=clock or p.lease_clock(),
            stale=stale,
        )
        try:
            lease.keep()
            p.manifests.claim(pid, lease.epoch, lease.confirm)
        except BaseException:
            p.manifests.unclaim(pid)
            lease.release()
            raise
        return lease

    def writer_holder(self, wal_root: str, pid: str) -> str | None:
        holder = current_holder(self.parts.objects, layout.writer_lease(pid))
        return None if holder is None else holder.describe()

    def wal_note(self, wal_root: str) -> str | None:
        return (
            f"note: {self.parts.root} is on an object store: WAL bytes, heartbeats and "
            f"pending transactions are those of this machine's writers ({wal_root}); "
            "writers on other machines keep theirs on their own disks"
        )

    def note_live_writers(self, found: dict[str, dict[str, Any]]) -> None:
        # a writer on any machine holds its lease in the bucket (§8.2)
        for pid in sorted({*found, *self.parts.segments.partitions()}):
            held = current_holder(self.parts.objects, layout.writer_lease(pid))
            body = found.setdefault(pid, {"partition": pid})
            body["live"] = held is not None
            if held is not None:  # the writer is the holder, whichever machine it runs on
                body["holder_pid"] = held.pid
                body["holder_host"] = held.host
                # this machine's heartbeat may be an earlier writer's (or its sealer's)
                body["beat_is_holders"] = body.get("pid") == held.pid and held.alive_here()

    # -- a lost machine's committed rows (§10.2) -----------------------------------------
    def staged(self) -> dict[str, list[int]]:
        return staged_ids(self.parts.objects)

    def seal_lost(self, skip: set[str], failures: dict[str, str]) -> list[tuple[str, int]]:
        p = self.parts
        sealer = LostSealer(
            p.objects,
            p.commits,
            p.segments,
            p.config.segment,
            p.manifests,
            lambda pid, purpose, min_epoch: self.claim(pid, purpose, min_epoch),
        )
        return sealer.seal_lost(skip, failures)


def claim_slot(
    kind: RootKind, host: str, open_writer: Callable[[str], PartitionWriter], where: str
) -> PartitionWriter:
    """The writer of the lowest-numbered core slot free for a writer on ``host``
    (``open_writer`` opens slot ``pid``'s writer by the kind's :meth:`slot_lease`):
    ``<host>-<k>`` on a POSIX root, the pool's ``w-<k>`` on an object root (§8.2,
    "Slots"). A held slot is skipped, never waited for; a slot whose partition cannot
    be recovered (damage ``quiver fsck`` names) is skipped too, so one damaged
    partition never stops the writers. LockedError when every slot is held."""
    for k in range(MAX_SLOTS):
        pid = kind.slot_name(host, k)
        try:
            return open_writer(pid)
        except LockedError:
            continue
        except CorruptionError as e:
            # a damaged slot stays for ``quiver fsck``; the worker writes elsewhere
            log.error("quiver.sink.slot_damaged root=%s partition=%s: %s", where, pid, e)
            continue
    pattern = kind.slot_name(host, 0).rsplit("-", 1)[0] + "-*"
    raise LockedError(f"{where}/{pattern}", f"other writers on all {MAX_SLOTS} slots")


def root_kind(root: str) -> type[FileRoot] | type[ObjectRoot]:
    """The kind of ``root``, from its URL: the one place anything asks which kind of
    root it is on. A store makes it with its parts once they are built, taking from
    the class first the parts it builds (:meth:`RootKind.commit_log`,
    :meth:`RootKind.segment_location`); a process without a store (a read task on an
    executor, a writing job's driver) takes its parts from the class."""
    return ObjectRoot if is_object_root(root) else FileRoot
