"""The QuiverStore facade: open/recover, append, finalize, read, ack, maintain, close.

A store is a root directory with one or more partitions (§1). Opening a store with
``partition=<id>`` takes that partition's single-writer lock and recovers it; with
``partition=None`` the handle only reads, acknowledges and maintains.

>>> import pyarrow as pa
>>> from quiver_spark import QuiverStore
>>> with QuiverStore.open("/tmp/quiver-doc") as store:      # doctest: +SKIP
...     store.append(pa.record_batch({"x": [1, 2, 3]}))
...     store.flush()                      # durable: acknowledged
...     meta = store.finalize()            # an immutable segment, visible to readers
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa

from . import layout, write_jobs
from .admission import Admission
from .config import StoreConfig
from .control.clock import elapsed
from .control.lease import PURPOSE_SEALER, PURPOSE_WRITER
from .control.manifest_store import ManifestStore
from .descriptor import (
    effective_config,
    ensure_schema,
    load_or_create_descriptor,
    location_key,
    read_descriptor,
    schemas_compatible,
    store_id,
)
from .errors import (
    CorruptionError,
    LeaseLostError,
    PolicyConflictError,
    SchemaMismatchError,
    StoreClosedError,
)
from .fs import DEFAULT_IO, FileIO
from .metrics import PROCESS, Metrics
from .objects import ObjectStore, open_objects
from .partition import PartitionWriter, RecoveryReport, wal_dirs
from .policy import (
    StorePolicy,
    policy_of,
    read_policy,
    replace_policy,
)
from .retention import RetentionResult
from .root_kind import RootKind, StoreParts, claim_slot, root_kind
from .seams import NO_DELETIONS, DeletedMarks, SubscriberNames
from .segment import SegmentMeta, SegmentReader
from .segment.backends import check_location
from .store_retention import StoreRetention
from .subscribers import SubscriberRegistry
from .urls import root_location
from .write_jobs import BatchCommit, TaskWrite

log = logging.getLogger(__name__)


class QuiverStore:
    """An open Quiver store (see module docstring)."""

    def __init__(
        self,
        root: str,
        config: StoreConfig,
        io: FileIO,
        descriptor: dict[str, Any],
        storage_options: dict[str, Any] | None,
        objects: ObjectStore,
    ) -> None:
        self.root = root
        self.config = config
        self.io = io
        self.objects = objects
        """The root's objects: every control object goes through it (ARCHITECTURE.md §2)."""
        kind = root_kind(root)
        self._descriptor = descriptor
        recorded = descriptor.get("segments_url") or f"{root}/{layout.segments_dir()}"
        kind.check_segment_path(config, recorded)
        if config.segment.path and location_key(config.segment.path) != location_key(recorded):
            raise PolicyConflictError(
                "segment.path",
                config.segment.path,
                f"the segment location recorded in {os.path.join(root, layout.store_descriptor())} at "
                f"creation, {recorded!r} (omit the option to use it)",
            )
        seg_url = recorded
        self.segments_url = seg_url
        # what each partition published, one read for a new process (ARCHITECTURE.md §11.1)
        self.manifests = ManifestStore(self.objects, facts=kind.manifest_facts(self.objects))
        self.segment_location = kind.segment_location(
            seg_url,
            self.objects,
            io=io,
            storage_options=storage_options,
            manifests=self.manifests,
        )
        self.commits = kind.commit_log(root, self.objects, io, self.store_id)
        self.segment_location.deleted_marks = self.deleted_marks
        self.lease_clock: Callable[[], float] = elapsed
        """The clock this handle observes other holders' leases by (§8.2): monotonic,
        and counting time the machine was suspended."""
        self.kind: RootKind = kind(
            StoreParts(
                root,
                config,
                self.objects,
                self.manifests,
                self.commits,
                self.segment_location,
                lambda: self.lease_clock,
            )
        )
        """What differs between a POSIX root and an object root (:mod:`.root_kind`)."""
        self.wal_root = self.kind.wal_root(config)
        self._has_registry = False  # seen to exist (a registry is never removed)
        self.writer: PartitionWriter | None = None
        self._subscribers: SubscriberRegistry | None = None
        self.metrics = Metrics()
        # admission under backpressure (ARCHITECTURE.md §15.2): the store's bytes as of
        # this handle's last retention pass and what it admitted since
        self._admission = Admission(root, self.metrics)
        self._retention = StoreRetention(self, self._admission, self.kind.live)
        """This handle's retention passes and what they keep between them."""
        self._closed = False
        self._maint_stop = threading.Event()
        self._maint_thread: threading.Thread | None = None
        self.idle_failures: dict[str, str] = {}
        """Partitions the last :meth:`finalize_idle_partitions` could not recover, with why."""
        self.maintenance_error: BaseException | None = None
        """The last failure of work done after a write had succeeded (retention, a
        finalize an append triggered); retried by later passes, logged when it happens."""

    # -- opening ---------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str,
        config: StoreConfig | None = None,
        *,
        partition: str | None = "p-0",
        create: bool = True,
        io: FileIO = DEFAULT_IO,
        storage_options: dict[str, Any] | None = None,
        background: bool = True,
    ) -> QuiverStore:
        """Open (and with ``create`` make) the store at ``path``.

        ``partition`` names the partition to write (its lock is taken and it is
        recovered; see :attr:`recovery`); None opens a read/maintain handle.
        ``background`` starts a maintenance thread that finalizes an open segment
        once it is ``segment.max_open_duration`` old.
        """
        config = config or StoreConfig()
        root = root_location("path", path)
        objects = open_objects(root, storage_options, io)
        if create and config.segment.path:  # refused before a STORE records the location
            check_location(config.segment.path, storage_options)
        descriptor = load_or_create_descriptor(objects, config, create)
        config = effective_config(root, objects, config, descriptor, create)
        store = cls(root, config, io, descriptor, storage_options, objects)
        if partition is not None:
            store.writer = store._partition_writer(partition)
            if background:
                store._start_maintenance()
        return store

    @classmethod
    def open_slot(
        cls,
        path: str,
        config: StoreConfig | None = None,
        *,
        host: str,
        storage_options: dict[str, Any] | None = None,
        background: bool = True,
    ) -> QuiverStore:
        """Open (and make) the store at ``path`` and claim a core slot to write: the
        lowest-numbered one free, ``<host>-<k>`` on a POSIX root, ``w-<k>`` of the pool
        every machine shares on an object root (ARCHITECTURE.md §8.2, "Slots"). A held
        slot is skipped, never waited for; LockedError when all are held."""
        store = cls.open(path, config, partition=None, storage_options=storage_options)
        try:
            store.writer = claim_slot(
                store.kind, host, lambda pid: store._partition_writer(pid, slot=True), store.root
            )
        except BaseException:
            store.close()
            raise
        if background:
            store._start_maintenance()
        return store

    @property
    def policy(self) -> StorePolicy:
        """The store's recorded policy (read again on every call)."""
        return read_policy(self.objects) or policy_of(self.config)

    def set_policy(
        self, changes: dict[str, Any], *, expected_generation: int | None = None
    ) -> StorePolicy:
        """Change the store's recorded policy (``changes``: option name -> parsed value);
        this handle applies it at once, other processes at their next retention pass."""
        new = replace_policy(self.objects, changes, expected_generation=expected_generation)
        self.apply_policy(new)
        return new

    def apply_policy(self, policy: StorePolicy) -> None:
        """Apply ``policy`` (as recorded) to this handle's configuration and its writer's."""
        retention = policy.retention(self.config.retention)
        if (
            retention != self.config.retention
            or policy.expire_after_s != self.config.subscriber_expire_after_s
        ):
            self.config = dataclasses.replace(
                self.config, retention=retention, subscriber_expire_after_s=policy.expire_after_s
            )
            if self.writer is not None:
                self.writer.config = self.config

    @property
    def recovery(self) -> RecoveryReport | None:
        """The recovery report of the partition opened for writing."""
        return self.writer.recovery if self.writer else None

    @property
    def store_id(self) -> str | None:
        """The store's identity (its STORE ``uuid``, ARCHITECTURE.md §7.1): a copy of the
        root has the same one, a store made again at the same path another. None only
        on a handle over a damaged STORE (``quiver fsck``)."""
        return store_id(self._descriptor)

    # -- schema ----------------------------------------------------------------------
    def schema(self) -> pa.Schema | None:
        """The store's schema, recorded by the first write (None before it)."""
        raw = self._descriptor.get("schema")
        if raw is None:
            self._reload_descriptor()
            raw = self._descriptor.get("schema")
        return pa.ipc.read_schema(pa.py_buffer(raw)) if raw is not None else None

    def _reload_descriptor(self) -> None:
        self._descriptor = read_descriptor(self.objects)

    def ensure_schema(self, schema: pa.Schema) -> pa.Schema:
        """Record ``schema`` as the store's if it has none; raise if incompatible."""
        current = self.schema()
        if current is None:
            self._descriptor = ensure_schema(self.objects, schema)
            current = self.schema()
            assert current is not None
        if not schemas_compatible(current, schema):
            raise SchemaMismatchError(current, schema, "column names or types differ")
        return current

    # -- writing ---------------------------------------------------------------------
    def _w(self) -> PartitionWriter:
        if self._closed:
            raise StoreClosedError(f"store {self.root} is closed")
        if self.writer is None:
            raise StoreClosedError(
                f"store {self.root} was opened without a partition: it cannot append"
            )
        return self.writer

    def append(self, batch: pa.RecordBatch | pa.Table, *, txn_id: int = 0) -> int:
        """Append a batch or a table (one unit: all of it or none); returns the last WAL seq.

        Acknowledged (durable) once :meth:`flush` returns, or after the background
        group fsync (``wal.flush_interval``) covers it. A call that raised kept none of
        its rows: retrying it whole never duplicates one.
        """
        w = self._w()
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        if not batches:
            return 0
        for b in batches:  # refuse before anything is written (or waited for)
            w.check_fits(b.nbytes)
            if self._descriptor.get("schema") is None or not schemas_compatible(
                self.schema() or b.schema, b.schema
            ):
                self.ensure_schema(b.schema)
        nbytes = sum(b.nbytes for b in batches)
        w.check_fits(nbytes, len(batches))
        self._admission.admit(
            nbytes,
            self.config.retention,
            run_pass=lambda: self.run_retention().throttle,
            survey=self._retention.survey_held_bytes,
            on_failure=self._keep_maintenance_error,
        )
        before = w.finalized_total
        seq = w.append_batches(batches, txn_id=txn_id)
        if w.finalized_total != before:
            self._retention_after_write()
        return seq

    def _retention_after_write(self) -> None:
        """Retention after a write succeeded: a failure is kept and logged, not raised
        (the write is done; raising would make a caller retry and duplicate it)."""
        try:
            self.run_retention()
        except Exception as e:
            self.maintenance_error = e
            log.error("quiver.retention.deferred root=%s: %s", self.root, e)

    def _keep_maintenance_error(self, e: Exception) -> None:
        self.maintenance_error = e

    @property
    def writing_partition(self) -> str | None:
        """The partition this handle writes (None: opened without one)."""
        return self.writer.pid if self.writer is not None else None

    def begin_txn(self, app: str, version: int, tag: str = "") -> int:
        """Start a transaction in the open partition; commit it with :meth:`commit_txn`."""
        return self._w().begin_txn(app, version, tag)

    def stage_txn(self, txn_id: int, batches: Sequence[pa.RecordBatch] | None = None) -> int:
        """On an object root, write transaction ``txn_id``'s rows to the root as
        ``partitions/<pid>/txns/<txn_id:020d>.txn`` (ARCHITECTURE.md §10.2), so that
        its rows survive the loss of this machine once it is committed: call it after
        :meth:`flush` and before the transaction is decided. ``batches``: its rows
        (default: what the writer holds of it). Returns the bytes written: 0 on a
        POSIX root (the WAL is on the store's own disk) or for a transaction without
        rows. A failure raises: the transaction must not be reported then."""
        return self.kind.stage(self._w(), txn_id, batches)

    def commit_txn(
        self, app: str, version: int, winners: list[tuple[str, int]], rows: int = 0
    ) -> bool:
        """Durably decide transaction ``(app, version)``; False if it was already decided."""
        return self.commits.commit(app, version, winners, rows)

    def flush(self) -> int:
        """Barrier: everything appended so far is durable on return."""
        return self._w().flush()

    def finalize(self) -> SegmentMeta | None:
        """Seal the open segment now (None if it holds nothing committed); then retention."""
        meta = self._w().finalize()
        if meta is not None:
            self._retention_after_write()
        return meta

    # -- reading ---------------------------------------------------------------------
    def partitions(self) -> list[str]:
        return self.segment_location.partitions()

    def segments(self, partition: str | None = None) -> list[SegmentMeta]:
        """Published segments, of one partition or of all (partition, then seq order)."""
        parts = [partition] if partition is not None else self.partitions()
        return [m for p in parts for m in self.segment_location.list(p)]

    def read_segment(self, meta: SegmentMeta, *, verify: bool = True) -> SegmentReader:
        """Open a segment for reading after verifying its checksum."""
        return self.segment_location.open(meta, verify=verify)

    def scan(self) -> Iterator[pa.RecordBatch]:
        """Every retained row, partition by partition in segment order."""
        for meta in self.segments():
            with self.read_segment(meta) as r:
                yield from r.batches()

    # -- maintenance -----------------------------------------------------------------
    @property
    def subscribers(self) -> SubscriberRegistry:
        """The store's :class:`~quiver_spark.subscribers.SubscriberRegistry` (opened lazily)."""
        if self._subscribers is None:
            self._subscribers = SubscriberRegistry.open(
                self.root,
                io=self.io,
                checkpoint_records=self.config.ack_checkpoint_records,
                salvage=self.config.salvage,
                objects=self.objects,
                journal=self.kind.journal,
            )
            self._subscribers.recorded = self.segment_location.reclaimed_totals
            self._has_registry = True
        return self._subscribers

    def has_registry(self) -> bool:
        """Whether a subscriber registry exists (once seen, it stays: one is never
        removed); asking creates nothing."""
        if self._subscribers is not None or self._has_registry:
            return True
        found = self.kind.has_registry()
        self._has_registry = found
        return found

    def wal_bytes(self) -> dict[str, int]:
        """WAL bytes on disk per partition (directory listings; no file is opened)."""
        return wal_dirs.wal_bytes(self.io, self.wal_root)

    def run_retention(
        self, now_ns: int | None = None, *, dry_run: bool = False, listing: bool = False
    ) -> RetentionResult:
        """One retention pass (steady state, time, size cap; ARCHITECTURE.md §15.1) under
        the store's recorded policy (§7.2), counting WAL bytes against the size cap.

        The one entry point every pass goes through: a writer's maintenance, a
        subscription's acknowledgement, ``quiver gc``. Updates the intake throttle
        (``backpressure`` over the cap), the metrics and the Prometheus text file
        ``<root>/metrics/<partition>.prom`` of a writer. ``dry_run`` plans and changes
        nothing (no registry is created either). ``listing`` lists every partition
        instead of reading their manifests (``quiver gc --full``, §11.1). The pass is
        :class:`~quiver_spark.store_retention.StoreRetention`'s.
        """
        return self._retention.run(now_ns, dry_run=dry_run, listing=listing)

    def unregistered_records(self, registry: SubscriberNames | None) -> list[str]:
        """Subscribers with an unexpired record (§13.8) that ``registry`` (its state as
        last read) does not register: the ack log lost their registration, so
        retention keeps their data until an operator adds or removes them.

        One listing of the records, and a read of each one whose name is not
        registered; the answer is reused for
        :data:`~quiver_spark.store_retention.RECORDS_PERIOD_S` while the registered
        names stay the same (a registration lost or made changes them)."""
        return self._retention.unregistered_records(registry)

    def publish_process_metrics(
        self, instance: str, *, scopes: tuple[str, ...] = (PROCESS,), partition: str | None = None
    ) -> str:
        """Write ``<root>/metrics/<instance>.prom``: this process's series, each labelled
        ``instance``; counters continue from the file's previous values on first use."""
        return self._retention.publish_process_metrics(instance, scopes=scopes, partition=partition)

    def maintain(self) -> dict[str, Any]:
        """The maintenance tick: finalize an idle open segment, then apply retention (also
        after a failed finalize, which is raised after the pass: a full disk is what the
        pass may free).

        Retention runs after a finalize, after a failed pass or finalize, and otherwise
        every ``segment.max_open_duration`` (at least 1 s); on an object root, while
        not throttled, every :data:`~quiver_spark.root_kind.IDLE_RETENTION_PERIOD_S` (each pass is requests).
        """
        done: dict[str, Any] = {"finalized": [], "deleted": {}}
        if self.writer is not None and not self._closed:
            failure: Exception | None = None
            meta = None
            try:
                meta = self.writer.maintain()
            except Exception as e:  # raised after the pass: a full disk is what it frees
                failure = e
            if meta is not None:
                done["finalized"].append((meta.partition, meta.seq))
            self.writer.write_heartbeat()
            due = time.monotonic() - self._retention.last_pass >= self._idle_retention_period()
            if meta is not None or due or failure is not None:
                try:
                    done["deleted"] = self.run_retention().deleted
                except Exception as e:
                    if failure is None:
                        raise
                    log.error("quiver.retention.deferred root=%s: %s", self.root, e)
            if failure is not None:
                raise failure
        return done

    def _idle_retention_period(self) -> float:
        """Seconds between a writer's retention passes with nothing new (see :meth:`maintain`)."""
        period = max(1.0, self.config.segment.max_open_duration_s)
        return self.kind.idle_retention_period(period, self._admission.throttled)

    def finalize_idle_partitions(
        self, *, local: bool = True, staged: bool = True
    ) -> list[tuple[str, int]]:
        """Finalize committed data of partitions whose writer is gone.

        Takes each free partition lock briefly (skipping held ones), which recovers the
        partition and seals whatever committed data its WAL holds. Any process that can
        reach the WAL root may run this: a source's planning, ``quiver gc``, the driver.
        On an object root it then seals, from their staged objects, the committed
        transactions of every partition whose writer lease is free (released, or seen
        expired by this process), whichever machine wrote them (§10.2). ``local`` and
        ``staged`` choose the two halves (the driver runs the second at most every few
        seconds).
        """
        self.idle_failures = {}
        mine = self.writer.pid if self.writer else None
        sealed, done = (
            wal_dirs.seal_idle(
                self.io,
                self.wal_root,
                # a sealer: it writes nothing of its own
                lambda pid: self._partition_writer(pid, PURPOSE_SEALER),
                # then its lease is released: this handle writes the partition no more,
                # and its retention changes it at whatever epoch the next writer holds
                self.manifests.unclaim,
                skip=mine,
                failures=self.idle_failures,
            )
            if local
            else ([], set())
        )
        if staged:
            skip = done | ({mine} if mine else set())
            sealed += self.kind.seal_lost(skip, self.idle_failures)
        return sealed

    def staged(self) -> dict[str, list[int]]:
        """Object root: the staged transaction ids of every partition (one listing of
        ``partitions/``, §10.2); none on a POSIX root."""
        return self.kind.staged()

    def _partition_writer(
        self, pid: str, purpose: str = PURPOSE_WRITER, *, slot: bool = False
    ) -> PartitionWriter:
        lease = self.kind.slot_lease(pid) if slot else self.kind.writer_lease(pid, purpose)
        try:
            writer = PartitionWriter(
                pid=pid,
                wal_root=self.wal_root,
                config=self.config,
                segments=self.segment_location,
                commits=self.commits,
                io=self.io,
                deleted=self,
                lease=lease,
            )
        except BaseException:
            lease.release()
            self.manifests.unclaim(pid)
            raise
        return writer

    def deleted_marks(self, partition: str) -> DeletedMarks:
        """The ack log's record of ``partition``'s deleted segments as of now (read
        afresh: a writer's recovery consults it); none when nobody ever subscribed."""
        if not self.has_registry():
            return NO_DELETIONS
        reg = self.subscribers
        reg.refresh()
        return reg.deleted_marks(partition)

    def heartbeats(self) -> dict[str, dict[str, Any]]:
        """Last heartbeat of each partition's writer, with ``live`` telling if it still runs."""
        out = wal_dirs.heartbeats(self.io, self.wal_root)
        self.kind.note_live_writers(out)
        return out

    def _start_maintenance(self) -> None:
        period = min(1.0, max(0.01, self.config.segment.max_open_duration_s / 4))

        def loop() -> None:
            while not self._maint_stop.wait(period):
                try:
                    self.maintain()
                except Exception as e:  # kept and retried by the next tick
                    self.maintenance_error = e
                    log.exception("quiver.maintenance.error root=%s", self.root)

        self._maint_thread = threading.Thread(target=loop, name="quiver-maintenance", daemon=True)
        self._maint_thread.start()

    # -- writing jobs (ARCHITECTURE.md §10; :mod:`quiver_spark.write_jobs`) ------------
    @classmethod
    def prepare_writes(
        cls,
        root: str,
        config: StoreConfig,
        schema: pa.Schema,
        *,
        storage_options: dict[str, Any] | None = None,
    ) -> str | None:
        """What a writing job checks once, before any of its tasks writes; the store's
        id its commit records name (:func:`~quiver_spark.write_jobs.prepare_writes`)."""
        return write_jobs.prepare_writes(
            cls.open, root, config, schema, storage_options=storage_options
        )

    @staticmethod
    def write_task(
        slot: Callable[[], write_jobs.TaskStore],
        batches: Iterable[pa.RecordBatch],
        app: str,
        version: int,
        tag: str,
        *,
        lost: Callable[[BaseException], None],
    ) -> TaskWrite:
        """One task of a writing job: its rows as one durable (and, on an object root,
        staged) transaction in the partition ``slot()`` opens; what the job's commit
        names (:func:`~quiver_spark.write_jobs.write_task`)."""
        return write_jobs.write_task(slot, batches, app, version, tag, lost=lost)

    @classmethod
    def commit_batch(
        cls,
        root: str,
        config: StoreConfig,
        app: str,
        version: int,
        winners: Sequence[tuple[str, int]],
        rows: int = 0,
        *,
        store_id: str | None,
        storage_options: dict[str, Any] | None = None,
    ) -> BatchCommit:
        """Durably decide batch ``(app, version)`` of a writing job, then seal orphans
        (:func:`~quiver_spark.write_jobs.commit_batch`)."""
        return write_jobs.commit_batch(
            cls.open, root, config, app, version, winners, rows,
            store_id=store_id, storage_options=storage_options,
        )  # fmt: skip

    @staticmethod
    def discard_batch(
        root: str,
        app: str,
        version: int,
        *,
        store_id: str | None,
        storage_options: dict[str, Any] | None = None,
    ) -> bool:
        """Decide batch ``(app, version)`` with no winners; False if it was decided
        earlier (:func:`~quiver_spark.write_jobs.discard_batch`)."""
        return write_jobs.discard_batch(
            root, app, version, store_id=store_id, storage_options=storage_options
        )

    @classmethod
    def seal_orphans(
        cls, root: str, config: StoreConfig, storage_options: dict[str, Any] | None = None
    ) -> tuple[list[tuple[str, int]], BaseException | None]:
        """Seal committed data of partitions whose writer is gone, best effort: what
        was sealed, and why it failed (:func:`~quiver_spark.write_jobs.seal_orphans`)."""
        return write_jobs.seal_orphans(cls.open, root, config, storage_options)

    @property
    def slot(self) -> str | None:
        """The partition this handle writes (a sink's core slot), if any."""
        return self.writer.pid if self.writer is not None else None

    def holds_partition(self) -> bool:
        """Whether this handle still holds the partition it writes, as far as can be
        told before a write: False once a renewal of its lease found it taken over;
        after a pause that outlasted half the lease's ttl without a renewal, one
        renewal (one request) tells. Otherwise no request: the writes themselves are
        fenced (§8.2). A POSIX root's lock is held until :meth:`close`."""
        if self.writer is None:
            return True
        try:
            self.writer.lease.check_held()  # a POSIX root's: nothing to check
        except LeaseLostError:
            return False
        except OSError as e:  # not renewed, not lost: the task's own checks decide
            log.warning("quiver.sink.slot_renew_failed root=%s error=%r", self.root, e)
        return True

    def required_store_id(self) -> str:
        """:attr:`store_id`, or CorruptionError naming the STORE that records none."""
        found = self.store_id
        if found is None:
            raise CorruptionError(
                self.objects.display(layout.store_descriptor()), 0, "it records no uuid"
            )
        return found

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Finalize committed data of the open partition, sync, release the lock."""
        if self._closed:
            return
        self._maint_stop.set()
        if self._maint_thread is not None:
            self._maint_thread.join()
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            self._closed = True
            if self._subscribers is not None:
                self._subscribers.close()

    def __enter__(self) -> QuiverStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
