"""Sealing one staged transaction of a lost machine (ARCHITECTURE.md §10.2).

Two holders of a partition's lease seal the committed staged transactions a lost
machine left: the partition's next writer (those its WAL does not hold) and an
observer taking the free lease as "sealer". :func:`seal_one` is what either does with
one staged id; each caller acts on the :class:`Sealed` it returns with its own
bookkeeping (the writer's look-again schedule and seq, the observer's failures).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..commits import CommitLog
from ..config import SegmentConfig
from ..errors import CorruptionError
from ..objects import ObjectStore
from ..segment import SegmentLocation, SegmentMeta
from ..staging import read_staged
from .model import WriterLease


class Outcome(enum.Enum):
    DAMAGED = "damaged"
    """Its bytes fail verification, or its body names another transaction or partition
    than its key: left in place (fsck names it, problem ``staged``)."""
    ABSENT = "absent"
    """Not (or no longer) there."""
    UNDECIDED = "undecided"
    """No commit record for its batch yet: the driver may still commit it; left."""
    LOST = "lost"
    """Its batch was decided without it: garbage."""
    WON = "won"
    """Committed: published as the partition's next segment (or sealed already): garbage."""


@dataclass(frozen=True)
class Sealed:
    """What :func:`seal_one` did with one staged transaction."""

    outcome: Outcome
    meta: SegmentMeta | None = None
    """WON: the segment published; None when the MANIFEST held the transaction already."""
    error: CorruptionError | None = None
    """DAMAGED: what verification found."""

    @property
    def garbage(self) -> bool:
        """The staged object is no longer needed (its rows are sealed or not wanted)."""
        return self.outcome in (Outcome.LOST, Outcome.WON)


def seal_one(
    objects: ObjectStore,
    commits: CommitLog,
    segments: SegmentLocation,
    segment: SegmentConfig,
    pid: str,
    txn_id: int,
    *,
    lease: WriterLease,
    check_lease: Callable[[], None],
    log: logging.Logger,
    first_seq: int = 0,
) -> Sealed:
    """Read staged transaction ``txn_id`` of ``pid``, look up its batch's commit record
    and, when the batch won it, publish its rows at ``lease``'s epoch (after
    ``check_lease``, which raises when the lease is lost) from ``first_seq`` on.
    ``log`` is the caller's logger: a damaged object is logged
    ``quiver.staged.damaged``, a publication ``quiver.staged.sealed``."""
    try:
        st = read_staged(objects, pid, txn_id)
    except CorruptionError as e:
        log.error("quiver.staged.damaged partition=%s txn=%d: %s", pid, txn_id, e)
        return Sealed(Outcome.DAMAGED, error=e)
    if st is None:
        return Sealed(Outcome.ABSENT)
    rec = commits.get(st.app, st.version)
    if rec is None:
        return Sealed(Outcome.UNDECIDED)
    if (pid, txn_id) not in rec.winners:
        return Sealed(Outcome.LOST)
    check_lease()
    meta = segments.publish_staged(
        pid,
        txn_id,
        st.batches(),
        ingestion_ns=st.created_ns,
        epoch=lease.epoch,
        target_batch_rows=segment.target_batch_rows,
        event_time_column=segment.event_time_column,
        first_seq=first_seq,
    )
    if meta is not None:
        log.info(
            "quiver.staged.sealed partition=%s txn=%d seq=%d rows=%d epoch=%d",
            pid,
            txn_id,
            meta.seq,
            meta.rows,
            lease.epoch,
        )
    return Sealed(Outcome.WON, meta)
