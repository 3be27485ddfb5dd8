"""Planning a partition writer's recovery: what disk and store hold, as frozen plans.

Recovery at open (ARCHITECTURE.md §9.3), and in place after a failed I/O in a process
that goes on (§9.4), reads STATE, the ack log's ``DELETED`` facts, the segment
location and, on an object root, the partition's MANIFEST and staged transactions.
The functions here read and decide, asking the segment location's publication
(:class:`~quiver_spark.segment.publication.Publication`) wherever the two kinds of
root differ; they write nothing. The writer
(:class:`~quiver_spark.partition.rebuild.Rebuild`) applies what they return,
in this order:

1. :func:`read_state` and :func:`deleted_marks`: what STATE and the ack log say;
2. the writer fences (its lease checked; where the MANIFEST publishes, the MANIFEST
   brought to its epoch before anything is listed or removed, §16.2);
3. :func:`plan_publishing`: what becomes of the segment STATE names as
   ``publishing`` (:class:`PublishingPlan`); the writer carries it out;
4. the writer removes stale files and brings its MANIFEST up to date;
5. :func:`next_segment_seq`: the segment seq floor; :func:`list_staged` and
   :func:`plan_recovery`: sealed and retired transactions, staged objects that are
   garbage or another incarnation's, the record floor (:class:`RecoveryPlan`); the
   writer drops the garbage, scans and cuts the WAL, and replays the steps of
   :func:`replay` into its open segment and pending transactions.

Each plan is made from reads taken after the effects it depends on (the listing
after the fence, the floors after the cleanup), so there are several, not one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .. import format as fmt
from ..control.manifest import Manifest
from ..control.txn_retirement import NOTHING_RETIRED, TxnRetirement
from ..errors import CorruptionError
from ..fs import FileIO
from ..ranges import RangeSet
from ..seams import NO_DELETIONS, DeletedMarks, DeletedSegments
from ..segment import CleanupReport, SegmentLocation, SegmentMeta
from ..segment.publication import Publishing
from ..staging import StagedTxn
from ..wal import WalDecoder, WalRecovery, decode_txn
from .model import Txn

log = logging.getLogger(__name__)


def minus(covered: RangeSet, ranges: Iterable[tuple[int, int]]) -> RangeSet:
    """``covered`` without ``ranges`` (inclusive seq ranges)."""
    pieces = list(covered)
    for a, b in ranges:
        nxt: list[tuple[int, int]] = []
        for x, y in pieces:
            if b < x or a > y:
                nxt.append((x, y))
                continue
            if x < a:
                nxt.append((x, a - 1))
            if b < y:
                nxt.append((b + 1, y))
        pieces = nxt
    return RangeSet(pieces)


# -- §9.3 step 2: STATE and the ack log ------------------------------------------------
def read_state(io: FileIO, path: str) -> dict:
    """The partition's STATE (§6.1); its defaults when there is none."""
    try:
        raw = io.read_file(path)
    except FileNotFoundError:
        return {"next_seq": 1, "covered": [], "publishing": None}
    body = fmt.decode_frame(path, fmt.MAGIC_STATE, raw)
    for key in ("next_seq", "covered"):
        if key not in body:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"STATE lacks {key!r}")
    return body


def deleted_marks(
    state: Mapping[str, Any], pid: str, deleted: DeletedSegments | None, *, needed: bool
) -> DeletedMarks:
    """The ack log's DELETED facts for ``pid`` (retention records them before it
    unlinks): the one durable trace of segments that are gone, read only when STATE
    cannot tell (missing: a new or lost ``wal.path``) or names a segment as
    ``publishing`` (its ``.meta`` may be missing). Unless they are ``needed``
    (:attr:`~quiver_spark.segment.publication.Publication.needs_deleted_marks`), a
    damaged ack log stops no new writer: its floor is the MANIFEST's alone then (§22)."""
    if deleted is not None and state.get("publishing"):
        return deleted.deleted_marks(pid)
    if deleted is not None and "partition" not in state:
        try:
            return deleted.deleted_marks(pid)
        except CorruptionError as e:
            if needed:
                raise
            # the MANIFEST still keeps every seq published below its high
            log.warning("quiver.recovery.deleted_marks_unread partition=%s: %s", pid, e)
    return NO_DELETIONS


# -- §9.3 step 2: the segment STATE names as publishing ---------------------------------
@dataclass(frozen=True)
class PublishingPlan:
    """What :func:`plan_publishing` decided for STATE's ``publishing`` segment."""

    action: Publishing
    meta: SegmentMeta | None = None
    txns: tuple[int, ...] = ()
    """Object root: the transactions STATE says the segment holds (§10.2)."""

    @property
    def rewrites_state(self) -> bool:
        """STATE is written again as read before the segment is published: it may be
        one whose rename is not durable yet, and a segment published on its word
        beside the old STATE after a power loss would be read beside the WAL records
        the old STATE replays (§9.3 step 2)."""
        return self.action in (Publishing.FINISH, Publishing.AGAIN, Publishing.OWN)


def plan_publishing(
    state: Mapping[str, Any],
    deleted: DeletedMarks,
    segments: SegmentLocation,
    pid: str,
    state_path: str,
    *,
    republish: bool,
) -> PublishingPlan:
    """Decide what becomes of STATE's ``publishing`` segment, after the writer fenced:
    the location's publication answers (:meth:`~quiver_spark.segment.publication.
    Publication.settle`: whether its ``.meta`` exists, unless ``republish``: after a
    failure in this process its ``.meta`` is written again even if it exists; or,
    where the MANIFEST publishes, whether it records the transactions STATE names)."""
    body = state.get("publishing")
    if not body:
        return PublishingPlan(Publishing.NONE)
    meta = SegmentMeta.from_body(state_path, body)
    txns = tuple(int(t) for t in state.get("publishing_txns", ()))
    action = segments.publication.settle(meta, txns, deleted, republish=republish)
    if action is Publishing.DELETED:
        log.info("quiver.recovery.published_then_deleted partition=%s seq=%d", pid, meta.seq)
        return PublishingPlan(Publishing.DELETED)
    return PublishingPlan(action, meta, txns)


def gone_unpublished(
    plan: PublishingPlan, pid: str, listed: Manifest | None, *, acks_known: bool
) -> bool:
    """STATE's segment was missing when ``plan`` published it (SegmentMissingError of
    kind "missing"). True when its rows are read again from the WAL: on an object root,
    when it was never published (``listed``, the MANIFEST, does not name it, and the
    ack log, when known, records no deletion of it): a successor passed its seq over
    and gc removed its objects; its rows are in this WAL only, sealed anew, never
    taken for delivered. False when it was published and deleted since (logged), or
    when its ``.meta`` was being written again."""
    assert plan.meta is not None
    seq = plan.meta.seq
    if plan.action is Publishing.AGAIN:
        return False
    if (
        plan.action is Publishing.OWN
        and acks_known
        and listed is not None
        and not listed.lists(seq)
    ):
        log.warning(
            "quiver.recovery.unpublished_removed partition=%s seq=%d: its rows are sealed "
            "again from the WAL",
            pid,
            seq,
        )
        return True
    log.info("quiver.recovery.published_then_deleted partition=%s seq=%d", pid, seq)
    return False


# -- §9.3 steps 3-5: floors, transactions, staged objects -------------------------------
def next_segment_seq(
    next_seq: int,
    deleted: DeletedMarks,
    cleanup: CleanupReport,
    manifest: Manifest | None,
) -> int:
    """The next segment seq: STATE's ``next_seq`` (as the settling of its
    ``publishing`` segment left it), raised above every seq that must not be used
    again: every seq ever published (listed, quarantined, recorded deleted in the ack
    log, or below the MANIFEST's high) and the seqs the cleanup left taken
    (``highest_taken``: an unpublished orphan's seq is reused where the cleanup
    removed it, no reader saw it; where it was left, another holder's perhaps, the
    writer starts above it and its first publication records it void, §11.3)."""
    high = manifest.high if manifest is not None else 0
    return max(next_seq, max(cleanup.highest_taken, deleted.highest, high) + 1)


def list_staged(
    segments: SegmentLocation, pid: str, manifest: Manifest | None
) -> tuple[int, ...] | None:
    """With a MANIFEST to list against: the staged transactions under ``txns/`` (one
    LIST where transactions are staged); None otherwise."""
    if manifest is None:
        return None
    return segments.publication.staged_txns(pid)


@dataclass(frozen=True)
class RecoveryPlan:
    """What recovery does with the WAL and the transactions, once STATE's segment is
    settled, stale files removed and the segment seq floor raised."""

    record_floor: int
    """The lowest seq the WAL writer may give its next record but for STATE's: above
    every covered seq (or new records would look covered) and above every transaction
    id the MANIFEST or a staged object names (no id of another incarnation is reused)."""
    sealed_txns: frozenset[int] = frozenset()
    """Object root: transactions the MANIFEST names: sealed by another holder, taken
    out of replay and covered, never sealed again (§10.2)."""
    retirement: TxnRetirement = NOTHING_RETIRED
    """Object root: the transactions the MANIFEST retires (``txn_floor``, ``txn_high``,
    ``txns_open``): sealed or decided against, taken out of replay like sealed ones."""
    staged: tuple[int, ...] | None = None
    """Object root with a MANIFEST: the staged transactions listed (None: not listed)."""
    garbage: tuple[int, ...] = ()
    """Staged transactions the MANIFEST names: their objects are removed at once."""
    unsealed: tuple[int, ...] = ()
    """Staged transactions the MANIFEST does not name (and those its ``txns_open`` names
    that the listing did not show): another incarnation's (a lost disk) unless this WAL
    holds them; the writer seals the committed ones itself."""
    txn_ceiling: int | None = None
    """Object root: the highest ``txn_floor`` the writer records until a listing of
    ``txns/`` made after its open was taken into account (the open's may lag)."""

    def next_record_seq(self, wal: WalRecovery, state: Mapping[str, Any]) -> int:
        """Where the new WAL writer starts after ``wal``'s scan: record seqs continue
        from the durable floor (STATE's included), never from 1."""
        return max(wal.next_record_seq, int(state.get("next_record_seq", 1)), self.record_floor)

    def retired(self, pending: Iterable[int]) -> list[int]:
        """Of the ``pending`` transactions replay opened, those sealed by another
        holder or retired, in order."""
        ids = set(pending)
        return sorted((self.sealed_txns & ids) | {t for t in ids if self.retirement.retired(t)})


def plan_recovery(
    manifest: Manifest | None,
    staged: tuple[int, ...] | None,
    *,
    covered: RangeSet,
    unlisted_ceiling: int | None,
) -> RecoveryPlan:
    """The transactions and the record floor of a recovery, from the MANIFEST, the
    ``staged`` transactions :func:`list_staged` listed and the seqs ``covered``;
    ``unlisted_ceiling``: the txn ceiling when nothing was listed
    (:attr:`~quiver_spark.segment.publication.Publication.unlisted_txn_ceiling`)."""
    record_floor = max((hi for _, hi in covered), default=0) + 1
    if staged is None or manifest is None:
        return RecoveryPlan(record_floor, txn_ceiling=unlisted_ceiling)
    sealed = manifest.sealed_txns()
    # an id the MANIFEST records open that the listing did not show (a listing lagging
    # behind the bucket, or no object) is looked at as an unsealed one too: the first
    # publication's listing may lag as well, and the high would then retire it unseen
    listed = set(staged)
    hidden = {t for t in manifest.txns_open if t not in listed and not manifest.seals(t)}
    # above txn_high too: an id of its own at or below it, not open, would be retired
    txn_floor = max([*sealed, *staged, manifest.txn_floor, manifest.txn_high], default=0)
    return RecoveryPlan(
        max(record_floor, txn_floor + 1),
        sealed_txns=frozenset(sealed),
        retirement=manifest.retirement,
        staged=staged,
        garbage=tuple(t for t in staged if manifest.seals(t)),
        unsealed=tuple(sorted({*(t for t in staged if not manifest.seals(t)), *hidden})),
        txn_ceiling=manifest.txn_floor,
    )


def staged_by_another(txn: Txn, staged: StagedTxn | None) -> bool:
    """Whether the staged object under ``txn``'s id (``staged``, read back; None: gone)
    is another incarnation's transaction, not the one this WAL holds (§10.2).

    An id is unique among the transactions the bucket names, not among those a WAL
    holds: a transaction a machine never staged (so never reported: its task was paused
    or failed before) names nothing, and the partition's next writer elsewhere may give
    its id to one of its own. The object under the id is then the other writer's, and a
    commit record naming ``(partition, id)`` speaks of it. A staged object records its
    transaction's batch, rows and first record's ingestion time, which its WAL keeps
    (every stage of a transaction writes the same bytes): any difference means the
    object is not this WAL's transaction."""
    if staged is None:
        return False
    rows = sum(batch.num_rows for _, _, batch in txn.records)
    created = txn.records[0][1] if txn.records else 0
    return (staged.app, staged.version, staged.rows, staged.created_ns) != (
        txn.app,
        txn.version,
        rows,
        created,
    )


# -- §9.3 step 5: replay ----------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """A batch record replay hands over: ``txn_id`` 0 joins the open segment, another
    its pending transaction. ``discarded``: its transaction was decided and its records
    discarded (the marker's file deleted as unneeded: its seq covered); counted, never
    kept."""

    seq: int
    ingestion_ns: int
    batch: pa.RecordBatch
    txn_id: int = 0
    discarded: bool = False


def replay(wal: WalRecovery, covered: RangeSet, old: float) -> Iterator[Txn | Replayed]:
    """The WAL records not in ``covered``, in WAL order, lazily: a :class:`Txn` for each
    transaction replay opens (pending, counted from ``old``: recovered data is sealed
    promptly once its commit is known), a :class:`Replayed` for each batch.

    ``covered`` is read as replay goes (a finalize it triggers covers only records it
    handed over). A data record whose marker is covered while it is not (left by an
    older writer that covered a marker before its data) opens its transaction through
    the marker's decision instead of wedging the partition; one naming a transaction
    with no marker and nothing covered is a CorruptionError, raised where it is met.
    """
    decoder = WalDecoder()
    covered_markers: dict[int, dict] = {}
    opened: set[int] = set()

    def txn(txn_id: int, info: dict) -> Txn:
        opened.add(txn_id)
        return Txn(
            txn_id, str(info["app"]), int(str(info["version"])), str(info["tag"]), first_mono=old
        )

    for scan in wal.scans:
        for rec in scan.records:
            batch = decoder.decode(rec)  # keeps the per-file schema current
            if rec.rtype == fmt.REC_TXN and rec.seq in covered:
                covered_markers[rec.seq] = decode_txn(rec)
                continue
            if rec.seq in covered:
                continue
            if rec.rtype == fmt.REC_TXN:
                yield txn(rec.seq, decode_txn(rec))
                continue
            if batch is None:
                continue
            step = Replayed(rec.seq, rec.ingestion_ns, batch, rec.txn_id)
            if rec.txn_id == 0 or rec.txn_id in opened:
                yield step
                continue
            if rec.txn_id in covered_markers:
                yield txn(rec.txn_id, covered_markers[rec.txn_id])
                yield step
                continue
            if rec.txn_id in covered:
                # the marker's file was deleted as unneeded: its transaction was decided
                # and these records discarded (a winner's are covered first)
                yield Replayed(rec.seq, rec.ingestion_ns, batch, rec.txn_id, discarded=True)
                continue
            raise CorruptionError(
                scan.path, rec.offset, f"record {rec.seq} names unknown txn {rec.txn_id}"
            )
