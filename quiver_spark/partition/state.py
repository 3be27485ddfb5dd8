"""The mutable state of one partition's writer, and its STATE file (ARCHITECTURE.md §6.3,
§7).

:class:`PartitionState` is what the writer (:class:`~.writer.PartitionWriter`) owns
and hands to its collaborators, the sealing (:class:`~.sealing.Sealing`) and the
rebuild (:class:`~.rebuild.Rebuild`): the open segment, the pending transactions, the
WAL writer, the covered seqs, the next segment seq, the segment past the commit point,
the failure it carries, the staged transactions it keeps track of. It decides nothing
but what it encodes: STATE's body (:meth:`~PartitionState.write_state`) and the
transactions a publication records retired (:meth:`~PartitionState.txn_retirement`).
"""

from __future__ import annotations

import os
import threading
import time

from .. import format as fmt
from .. import layout
from ..commits import CommitLog
from ..config import StoreConfig, validate_name
from ..control.txn_retirement import TxnRetirement
from ..fs import FileIO
from ..ranges import RangeSet
from ..seams import DeletedSegments
from ..segment import SegmentLocation, SegmentMeta
from ..wal import WalWriter
from .failure import FailureState
from .model import OpenSegment, Txn, WriterLease, partition_dir
from .staged import StagedBook


class PartitionState:
    """One partition writer's state; its lock guards every field."""

    # rebuilt from disk by every recovery (:meth:`~.rebuild.Rebuild.recover`)
    wal: WalWriter
    covered: RangeSet
    next_seq: int

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
        """The partition's writer lease (§12.3), released at close: on a POSIX root
        :data:`~.model.NO_LEASE`."""
        self.deleted = deleted
        self.config = config
        self.segments = segments
        self.publication = segments.publication
        """What makes a segment published here: asked wherever the two kinds of root
        differ (its transactions named, the fence, what recovery reads, §12.4)."""
        self.commits = commits
        self.io = io
        self.dir = partition_dir(wal_root, pid)
        self.wal_dir = os.path.join(self.dir, layout.wal_dir_name())
        self.state_path = os.path.join(self.dir, layout.state_file_name())
        self.lock = threading.RLock()
        self.open = OpenSegment()
        self.pending: dict[int, Txn] = {}
        self.recheck: dict[int, tuple[float, float]] = {}  # txn -> (next look, interval)
        self.closed = False
        self.last_write_ns: int | None = None
        self.finalized_total = 0
        self.last_finalized: SegmentMeta | None = None
        self.last_published: SegmentMeta | None = None
        self.unpublished: SegmentMeta | None = None
        """The segment past the commit point, not published yet."""
        self.unpublished_txns: tuple[int, ...] = ()
        # WAL seqs being admitted into the open segment right now: a finalize that
        # an admission triggers must not delete the WAL file holding them
        self.admitting: set[int] = set()
        self.recovering = False
        self.maintenance_error: BaseException | None = None
        # a failure that may have left the in-memory state other than what recovery
        # would rebuild from disk, and what it leaves to do (§7.4)
        self.failure = FailureState(self.pid)
        # STATE's wal_limit: WAL files cut after a failure (first seq -> last seq read)
        self.wal_limit: dict[int, int] = {}
        # object root: the staged transactions of this partition it keeps track of
        # (failed deletes, another incarnation's, the floor's ceiling; §12.6)
        self.staged = StagedBook(segments, self.pid)

    def poison(self, e: BaseException) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk
        (:meth:`FailureState.poison`, §7.4)."""
        self.failure.poison(e, self.wal)

    def forget_unsealed(self) -> None:
        """Empty what a recovery rebuilds from the WAL (§7.3)."""
        self.open = OpenSegment()
        self.pending = {}
        self.unpublished = None
        self.unpublished_txns = ()
        self.admitting = set()

    def txn_retirement(self) -> TxnRetirement:
        """The transactions to record retired where publications name transactions
        (§12.6; recorded nowhere else): every id up to the floor, below the lowest
        transaction this writer has not sealed yet (pending, committed in the open
        segment, being admitted, or another incarnation's it looks at), else its highest
        id; up to that id, those not sealed yet open; capped as :meth:`StagedBook.floor`
        says."""
        # ``admitting``: a transaction being admitted (its marker among its seqs) is in
        # neither ``pending`` nor the open segment while a finalize it triggers runs
        writing = [*self.pending, *self.open.txns, *self.admitting]
        return self.staged.floor(writing, self.unpublished_txns, self.wal.next_seq - 1)

    def write_state(self, publishing: SegmentMeta | None) -> None:
        """Replace STATE atomically (§6.3): ``publishing``, the segment past the commit
        point, or None."""
        # a cut is kept while its file exists (this write precedes any unlink)
        present = {f.first_seq for f in self.wal.files()}
        self.wal_limit = {k: v for k, v in self.wal_limit.items() if k in present}
        body = {
            "partition": self.pid,
            "next_seq": self.next_seq,
            "covered": self.covered.to_list(),
            "publishing": publishing.to_body() if publishing is not None else None,
            "next_record_seq": self.wal.next_seq,
            "updated_ns": time.time_ns(),
        }
        if publishing is not None and self.unpublished_txns:  # object roots only (§12.6)
            body["publishing_txns"] = list(self.unpublished_txns)
        if self.staged.held:  # object roots only (§12.6): kept until decided
            body["held_txns"] = sorted(self.staged.held)
        if self.wal_limit:
            body["wal_limit"] = sorted([k, v] for k, v in self.wal_limit.items())
        self.io.atomic_write(self.state_path, fmt.encode_frame(fmt.MAGIC_STATE, body))
