"""A partition writer's publication of its own segment (ARCHITECTURE.md §11.2, §11.3).

Before a publication the writer still holds its lease with margin
(:func:`check_lease`; no lease, nothing to check: a POSIX root's flock is the
writer's). Where the MANIFEST is the publication point, a seq another holder's objects
took is recorded void and the same bytes go out at the next free seq
(:func:`publish_own`); where the ``.meta`` publishes no seq is ever taken, and
:func:`publish_own` is the location's plain publication.
"""

from __future__ import annotations

from collections.abc import Callable

from ..control.txn_retirement import NOTHING_RETIRED, TxnRetirement
from ..errors import LostRaceError, SeqTakenError
from ..segment import SegmentLocation, SegmentMeta
from .model import WriterLease

MOVES = 16
"""Seqs in a row found taken by another lease holder before a publication gives up."""


def check_lease(lease: WriterLease) -> None:
    """Before a publication: the writer still holds ``lease`` (a POSIX root's writer's
    :data:`~.model.NO_LEASE`: nothing to check), by
    :meth:`~quiver_spark.control.lease.Lease.check_held` (a lost one raises
    LeaseLostError; one short of time is renewed first)."""
    lease.check_held()


def publish_own(
    segments: SegmentLocation,
    pid: str,
    meta: SegmentMeta,
    *,
    next_seq: int,
    commit: Callable[[SegmentMeta], None],
    txns: tuple[int, ...] = (),
    retirement: TxnRetirement = NOTHING_RETIRED,
) -> SegmentMeta:
    """Publish the segment ``meta`` of ``pid``'s writer; returns the metadata published.

    Where the ``.meta`` publishes, this is :meth:`SegmentLocation.publish` (``txns``
    and ``retirement`` are recorded nowhere there). When another holder's ``.meta``
    took its seq (the MANIFEST publishes), the seq is recorded void in the
    MANIFEST (a later holder's epoch there raises LeaseLostError: the writer was
    fenced) and the same bytes are uploaded again at the first free seq from
    ``next_seq`` (the writer's next segment seq) on; ``commit(moved)`` makes the
    writer's next seq ``moved.seq + 1`` and STATE name the moved segment (its new
    commit point) before it is published. ``retirement``: the transactions the writer
    retires, recorded in the MANIFEST with it (§10.2).
    """
    for _ in range(MOVES):
        try:
            segments.publish(meta, txns=txns, retirement=retirement)
            return meta
        except SeqTakenError:
            pass
        segments.publication.void(pid, meta.seq)
        seq = max(next_seq, meta.seq + 1)
        for _ in range(MOVES):
            try:
                moved = segments.publication.move_data(meta, seq)
                break
            except SeqTakenError:
                segments.publication.void(pid, seq)
                seq += 1
        else:
            raise LostRaceError(
                pid, f"partition {pid}: {MOVES} seqs in a row taken after {seq}", attempts=MOVES
            )
        next_seq = moved.seq + 1
        commit(moved)
        meta = moved
    raise LostRaceError(
        pid, f"partition {pid}: segment {meta.seq} taken {MOVES} times in a row", attempts=MOVES
    )
