"""The mutable state of one partition's writer, by concern, and its STATE file
(ARCHITECTURE.md §6.2, §9).

The writer (:class:`~.writer.PartitionWriter`) owns one of each group below and hands
each of its collaborators only the groups it uses: the sealing
(:class:`~.sealing.Sealing`) and the rebuild (:class:`~.rebuild.Rebuild`). A group's
fields change only through its own methods (the objects it holds, a WAL writer or an
open segment, through theirs); the writer's lock guards every group, and neither
collaborator takes it: the writer calls into them under it.

====================  ==================================================================
:class:`PartitionHandles`  who and where: pid, lease, config, the segment location and
                      its publication, the commit log, file I/O, the partition's paths
:class:`WalLedger`    the WAL writer and what STATE records of it: covered seqs, the
                      next segment seq, the cuts of failed WAL files; writes STATE
:class:`UnsealedRows` rows not in a segment yet: the open segment, the pending
                      transactions (and when to look for their commit records again),
                      the seqs being admitted
:class:`SealedSegments`  the segment past the commit point and its transactions, and
                      what finalizes produced (for status)
:class:`Lifecycle`    the failure the writer carries (§9.4), the last maintenance
                      error, closed
====================  ==================================================================

The staged transactions a writer keeps track of on an object root are a group of their
own, :class:`~.staged.StagedBook`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

import pyarrow as pa

from .. import format as fmt
from .. import layout
from ..commits import CommitLog
from ..config import StoreConfig, validate_name
from ..fs import FileIO
from ..ranges import RangeSet
from ..seams import DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..wal import WalWriter
from .failure import FailureState
from .model import OpenSegment, Txn, WriterLease, partition_dir

Record = tuple[int, int, pa.RecordBatch]
"""A WAL record in memory: ``(seq, ingestion_ns, batch)``."""


class PartitionHandles:
    """Who the partition's writer is and what it works through; fixed for its
    lifetime but for the config, which only the writer replaces
    (:meth:`reconfigure`)."""

    def __init__(
        self,
        *,
        pid: str,
        wal_root: str,
        config: StoreConfig,
        segments: SegmentLocation,
        commits: CommitLog,
        io: FileIO,
        deleted: DeletedSegments | None,
        lease: WriterLease,
    ) -> None:
        self.pid = validate_name("partition", pid)
        self.lease = lease
        """The partition's writer lease (§8.2), released at close: on a POSIX root
        :data:`~.model.NO_LEASE`."""
        self.deleted = deleted
        self.config = config
        self.segments = segments
        self.publication = segments.publication
        """What makes a segment published here: asked wherever the two kinds of root
        differ (its transactions named, the fence, what recovery reads, §11.3)."""
        self.commits = commits
        self.io = io
        self.dir = partition_dir(wal_root, pid)
        self.wal_dir = os.path.join(self.dir, layout.wal_dir_name())
        self.state_path = os.path.join(self.dir, layout.state_file_name())

    def reconfigure(self, config: StoreConfig) -> None:
        self.config = config


class WalLedger:
    """The partition's WAL writer and what STATE records of it (§6.2): the covered
    seqs, the next segment seq and ``wal_limit``. A recovery rebuilds it from disk
    (:meth:`restore`, :meth:`limit`, :meth:`start`); the sealing covers what it seals
    or drops and moves the next seq on; both write STATE through :meth:`write_state`."""

    # rebuilt from disk by every recovery (:meth:`~.rebuild.Rebuild.recover`)
    wal: WalWriter
    covered: RangeSet
    next_seq: int

    def __init__(self, handles: PartitionHandles) -> None:
        self.handles = handles
        # STATE's wal_limit: WAL files cut after a failure (first seq -> last seq read)
        self.wal_limit: dict[int, int] = {}

    def restore(self, covered: RangeSet, next_seq: int) -> None:
        """What STATE says (§9.3 step 1)."""
        self.covered = covered
        self.next_seq = next_seq

    def limit(self, wal_limit: dict[int, int]) -> None:
        """STATE's ``wal_limit``, as recovery read it."""
        self.wal_limit = wal_limit

    def start(self, wal: WalWriter) -> None:
        """The WAL writer appends go to from now on (recovery's)."""
        self.wal = wal

    def set_next_seq(self, seq: int) -> None:
        """The seq the next segment is written under."""
        self.next_seq = seq

    def cover(self, lo: int, hi: int) -> None:
        """Seqs ``lo..hi`` are in a durable segment or never needed again."""
        self.covered.add(lo, hi)

    def cover_txn(self, txn_id: int, txn: Txn) -> None:
        """A dropped transaction's marker and records are never needed again."""
        for seq in (txn_id, *(r[0] for r in txn.records)):
            self.covered.add(seq, seq)

    def uncover(self, covered: RangeSet) -> None:
        """Recovery found seqs STATE covers that no segment holds: ``covered`` without
        them."""
        self.covered = covered

    def drop_covered_below(self, first_seq: int) -> None:
        """Forget covered seqs below the first WAL file kept."""
        self.covered.drop_below(first_seq)

    def write_state(
        self,
        publishing: SegmentMeta | None,
        publishing_txns: tuple[int, ...],
        held: Mapping[int, object],
    ) -> None:
        """Replace STATE atomically (§6.2): ``publishing``, the segment past the commit
        point, or None, with ``publishing_txns``, its transactions; ``held``, the
        transactions held on a damaged staged object."""
        # a cut is kept while its file exists (this write precedes any unlink)
        present = {f.first_seq for f in self.wal.files()}
        self.wal_limit = {k: v for k, v in self.wal_limit.items() if k in present}
        body = {
            "partition": self.handles.pid,
            "next_seq": self.next_seq,
            "covered": self.covered.to_list(),
            "publishing": publishing.to_body() if publishing is not None else None,
            "next_record_seq": self.wal.next_seq,
            "updated_ns": time.time_ns(),
        }
        if publishing is not None and publishing_txns:  # object roots only (§10.2)
            body["publishing_txns"] = list(publishing_txns)
        if held:  # object roots only (§10.2): kept until decided
            body["held_txns"] = sorted(held)
        if self.wal_limit:
            body["wal_limit"] = sorted([k, v] for k, v in self.wal_limit.items())
        self.handles.io.atomic_write(
            self.handles.state_path, fmt.encode_frame(fmt.MAGIC_STATE, body)
        )


class UnsealedRows:
    """What the writer holds that no segment does yet: the open segment, the pending
    transactions with when to look for their commit records again, and the WAL seqs
    being admitted into the open segment right now (a finalize that an admission
    triggers must not delete the WAL file holding them)."""

    def __init__(self) -> None:
        self.open = OpenSegment()
        self.pending: dict[int, Txn] = {}
        self.recheck: dict[int, tuple[float, float]] = {}  # txn -> (next look, interval)
        self.admitting: set[int] = set()

    def forget(self) -> None:
        """Empty what a recovery rebuilds from the WAL (§9.3)."""
        self.open = OpenSegment()
        self.pending = {}
        self.admitting = set()

    # -- the open segment ----------------------------------------------------------------
    def add(self, seq: int, ns: int, batch: pa.RecordBatch, since: float | None = None) -> None:
        self.open.add(seq, ns, batch, since)

    def holds_txn(self, marker: int) -> None:
        """The open segment holds rows of transaction ``marker``."""
        if marker not in self.open.txns:
            self.open.txns.append(marker)

    def add_marker(self, marker: int) -> None:
        """Transaction ``marker``'s REC_TXN record joins the open segment, after its
        data."""
        self.open.seqs.append(marker)

    def sealed(self) -> None:
        """The open segment went into a segment (or held only markers, now covered)."""
        self.open = OpenSegment()

    def aged(self, old: float) -> None:
        """The open segment's rows are at least as old as ``old`` (monotonic)."""
        self.open.opened_mono = min(self.open.opened_mono, old)

    # -- admission ---------------------------------------------------------------------
    def admitting_seqs(self, seqs: Iterable[int]) -> None:
        self.admitting = set(seqs)

    def admitted(self, seq: int) -> None:
        self.admitting.discard(seq)

    def admitted_all(self) -> None:
        self.admitting = set()

    # -- pending transactions ----------------------------------------------------------
    def begin(self, txn: Txn) -> None:
        self.pending[txn.txn_id] = txn

    def appended(self, txn_id: int, records: list[Record]) -> None:
        """A live append to pending ``txn_id``: its age counts from its first record."""
        txn = self.pending[txn_id]
        if txn.first_mono is None:
            txn.first_mono = time.monotonic()
        txn.records.extend(records)

    def replayed(self, txn_id: int, record: Record) -> None:
        self.pending[txn_id].records.append(record)

    def pop(self, txn_id: int) -> Txn:
        """Pending ``txn_id`` leaves the writer (recovery: sealed elsewhere, another
        writer's)."""
        return self.pending.pop(txn_id)

    def take(self, txn_id: int) -> Txn:
        """Pending ``txn_id`` is decided or dropped: no commit record is looked for."""
        txn = self.pending.pop(txn_id)
        self.recheck.pop(txn_id, None)
        return txn

    def look_again(self, txn_id: int, at: float, interval: float) -> None:
        self.recheck[txn_id] = (at, interval)

    def forget_decided_looks(self) -> None:
        for gone in set(self.recheck) - set(self.pending):
            del self.recheck[gone]

    # -- what it holds -----------------------------------------------------------------
    def writing(self) -> list[int]:
        """The transactions not sealed yet: pending, committed in the open segment, or
        being admitted."""
        # ``admitting``: a transaction being admitted (its marker among its seqs) is in
        # neither ``pending`` nor the open segment while a finalize it triggers runs
        return [*self.pending, *self.open.txns, *self.admitting]

    def undone(self) -> list[int]:
        """The seqs of every record held here, sorted (their WAL files are kept)."""
        return sorted(
            [*self.open.seqs, *self.admitting]
            + [s for t in self.pending.values() for s in (t.txn_id, *(r[0] for r in t.records))]
        )


class SealedSegments:
    """The segment past the commit point, not published yet, with the transactions
    STATE names with it; and what finalizes produced, for status."""

    def __init__(self) -> None:
        self.unpublished: SegmentMeta | None = None
        """The segment past the commit point, not published yet."""
        self.unpublished_txns: tuple[int, ...] = ()
        self.finalized_total = 0
        self.last_finalized: SegmentMeta | None = None
        self.last_published: SegmentMeta | None = None

    def forget(self) -> None:
        """Recovery reads the segment past the commit point from STATE (§9.3)."""
        self.unpublished = None
        self.unpublished_txns = ()

    def naming(self, txns: tuple[int, ...]) -> None:
        """The transactions of the segment about to pass the commit point."""
        self.unpublished_txns = txns

    def committed(self, meta: SegmentMeta) -> None:
        """``meta`` is past the commit point (or moved to another seq)."""
        self.unpublished = meta

    def published(self) -> None:
        self.last_published = self.unpublished
        self.unpublished = None

    def finalized(self, meta: SegmentMeta) -> None:
        self.finalized_total += 1
        self.last_finalized = meta


class Lifecycle:
    """The failure the writer carries (§9.4), the last maintenance error, and whether
    it is closed."""

    def __init__(self, pid: str) -> None:
        self.closed = False
        self.maintenance_error: BaseException | None = None
        # a failure that may have left the in-memory state other than what recovery
        # would rebuild from disk, and what it leaves to do (§9.4)
        self.failure = FailureState(pid)

    def poison(self, e: BaseException, wal: WalWriter) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`FailureState.poison`, §9.4)."""
        self.failure.poison(e, wal)

    def deferred(self, e: BaseException) -> None:
        """Maintenance (or a finalize an append triggered) failed with ``e``."""
        self.maintenance_error = e

    def maintained(self) -> None:
        self.maintenance_error = None

    def close(self) -> None:
        self.closed = True
