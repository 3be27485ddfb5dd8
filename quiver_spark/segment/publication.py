"""What makes a segment published, behind one interface (ARCHITECTURE.md §11.2, §11.1,
§11.3).

A location publishes its segments by one of two protocols, chosen once when
:class:`~quiver_spark.segment.catalog.SegmentLocation` opens:

=====================  ============================================================
``publish_files``      :class:`FilePublication` (a POSIX or fsspec root): a segment
                       is published iff its ``.meta`` exists; the partition's
                       MANIFEST, when the store keeps one, is an index of them
``publish_manifest``   :class:`ManifestPublication` (an object root): a segment is
                       published iff its partition's MANIFEST lists it; a ``.meta``
                       it does not list is another lease holder's orphan
=====================  ============================================================

:class:`Publication` is the interface; the catalog asks it wherever the two differ and
never which one it holds. This module also holds what both use: the view they answer
with and the MANIFEST changes and views they share.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..control.manifest import Manifest, ManifestEntry
from ..control.manifest_store import ManifestIndex
from ..control.txn_retirement import TxnRetirement
from ..seams import DeletedMarks
from .backend import Consume
from .files import DamagedSegment, Found, SegmentFiles, SegmentSurvey
from .meta import SegmentMeta
from .writer import Serialized

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionView:
    """One partition's published segments as a new reader sees them: from its
    MANIFEST (one read) plus the seqs published after ``high`` and not in it yet (a
    probe), or from a listing when there is no usable manifest (§11.1)."""

    entries: list[ManifestEntry]
    """Readable segments in seq order (damaged ones are in ``damaged`` only)."""
    damaged: list[DamagedSegment]
    high: int
    """The highest seq this view knows was published (0: none)."""
    from_manifest: bool


Build = Callable[[], Manifest]
"""Makes a partition's MANIFEST from a listing (when it has none or it is damaged)."""


class Publishing(enum.Enum):
    """What becomes of the segment a recovering writer's STATE names as ``publishing``
    (past its commit point, §9.3 step 2): :meth:`Publication.settle` answers."""

    NONE = "none"
    """STATE names none."""
    DELETED = "deleted"
    """It was published and retention deleted it since: left alone."""
    PUBLISHED = "published"
    """POSIX: its ``.meta`` is there: left alone."""
    FINISH = "finish"
    """POSIX: a crash between the commit point and publication: publish it."""
    AGAIN = "again"
    """POSIX, after a failure in this process: write its ``.meta`` again (its name may
    not be durable)."""
    OWN = "own"
    """Object root: publish it as this writer's (moved when its seq is taken, §11.3);
    this STATE is the one word that it is this writer's."""
    SEALED_ELSEWHERE = "sealed_elsewhere"
    """Object root: a sealer published some of its transactions from their staged
    objects while this writer was away (§10.2): never published; its WAL ranges are
    read again and those transactions skipped."""


class Publication(Protocol):
    """How a location's segments become published, and every answer that follows:
    what is published, what a new reader sees, what the MANIFEST records, and what
    the partition's writer does differently because of it (its publication, its
    recovery at open)."""

    deleted_marks: Callable[[str], DeletedMarks] | None
    """The ack log's record of a partition's deleted segments, when the store has one."""

    # -- what the partition's writer asks (§9.2, §9.3) ------------------------------
    names_txns: bool
    """Whether a publication names the transactions whose rows its segment holds (its
    MANIFEST entry, its ``.meta`` and the writer's STATE, §10.2): a transaction's rows
    then stay in one segment (but for a schema change within it), under the one schema
    its staged object has, so that the entry naming it holds all of it."""

    needs_deleted_marks: bool
    """Whether a writer that opens without STATE (a new partition, a lost ``wal.path``)
    needs the ack log's deleted marks, so that a damaged ack log stops it: the ack log
    is then the one durable trace of the seqs retention deleted. False where the
    MANIFEST and GONE keep every seq ever published (§22): logged, the open goes on."""

    keeps_unpublished: bool
    """Whether a writer at open leaves the unpublished ``.arrow`` files it finds and
    starts above their seqs (another holder's upload may be in flight, and a delete
    cannot be fenced, §11.3), rather than removing them as its own leftovers and
    reusing their seqs (one writer holds the partition, §5.4)."""

    unlisted_txn_ceiling: int | None
    """The highest ``txn_floor`` (and ``txn_high``) a writer records while no listing of ``txns/`` was
    taken into account (its open found no MANIFEST to list against): 0 where
    publications name transactions (a floor above a staged object nobody listed would
    make it garbage, §10.2); None (no limit) where nothing is staged."""

    def fence(self, partition: str) -> Manifest | None:
        """A writer at open, before it publishes, lists or removes anything: the
        MANIFEST brought to its epoch (§16.2), as it now reads; None where the
        partition's lock alone makes its writer the only one."""

    def manifest_at_open(self, partition: str, fenced: Manifest | None) -> Manifest | None:
        """A writer at open, once STATE's segment is settled and stale files removed:
        the MANIFEST its floors and transactions are planned from (``fenced``: what
        :meth:`fence` returned)."""

    def settle(
        self, meta: SegmentMeta, txns: tuple[int, ...], deleted: DeletedMarks, *, republish: bool
    ) -> Publishing:
        """What becomes of ``meta``, the segment a recovering writer's STATE names as
        ``publishing`` (``txns``: the transactions STATE says it holds), after the
        writer fenced; ``deleted``: the ack log's deleted marks; ``republish``: after a
        failure in this process, whose publication's name may not be durable."""

    def staged_txns(self, partition: str) -> tuple[int, ...] | None:
        """The staged transactions under the partition's ``txns/`` (one LIST); None
        where nothing is staged."""

    # -- publishing ---------------------------------------------------------------
    def create_arrow(
        self, partition: str, seq: int, fill: Callable[[Consume], Serialized]
    ) -> Serialized:
        """Write segment ``seq``'s ``.arrow`` from ``fill``, unpublished."""

    def same_or_raise(
        self, partition: str, seq: int, crc: int, size: int, ranges: tuple[tuple[int, int], ...]
    ) -> SegmentMeta:
        """The ``.meta`` already at ``seq`` when it is this very segment (a retry); else
        the error that says whose the seq is."""

    def make_meta(
        self, meta: SegmentMeta, txns: tuple[int, ...], sealed_by: int | None
    ) -> bytes | None:
        """Create segment ``meta``'s ``.meta`` (its ``.arrow`` is durable); the bytes
        this call wrote, None when this very segment's was there already."""

    def manifest_step(
        self,
        partition: str,
        metas: list[SegmentMeta],
        txns: tuple[int, ...],
        sealed_by: int | None,
        retirement: TxnRetirement,
    ) -> None:
        """After the ``.meta`` is durable: the MANIFEST lists the segments (on an object
        root with the transactions ``retirement`` retires, §10.2)."""

    def unmake_meta(self, partition: str, seq: int, encoded: bytes) -> None:
        """The manifest step refused the segment: undo the ``.meta`` (``encoded``)
        :meth:`make_meta` wrote."""

    def void(self, partition: str, seq: int) -> None:
        """Record ``seq`` gone, never published (another holder took it)."""

    def move_data(self, meta: SegmentMeta, seq: int) -> SegmentMeta:
        """Segment ``meta``'s bytes uploaded again as segment ``seq``."""

    def publish_staged(
        self,
        partition: str,
        txn_id: int,
        first_seq: int,
        write: Callable[[int], SegmentMeta],
        publish: Callable[[SegmentMeta], None],
    ) -> SegmentMeta | None:
        """Publish staged transaction ``txn_id`` as the partition's next segment:
        ``write(seq)`` writes its ``.arrow``, ``publish(meta)`` publishes it."""

    # -- what is published ----------------------------------------------------------
    def published_seqs(self, partition: str) -> list[int]:
        """Seqs of the published segments of ``partition``, sorted (no ``.meta`` read)."""

    def published_meta(self, partition: str, seq: int) -> SegmentMeta:
        """Segment ``seq``'s metadata if it is published; SegmentMissingError if not."""

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None,
        hints: Mapping[str, int] | None = None,
        *,
        entries: bool = False,
    ) -> dict[str, list[Found | ManifestEntry]]:
        """For each partition, the segments published from seq ``starts[p]`` on;
        ``hints``: each partition's newest publication hint, as just listed (§12);
        ``entries``: where the MANIFEST is the publication point, its entries as they
        are instead of each ``.meta`` (a retention pass's index, §15.1)."""

    def manifest_copy(self, partition: str) -> Manifest | None:
        """The MANIFEST that decides ``partition`` as last read or written (no request)."""

    def void_seqs(self, partition: str) -> tuple[int, frozenset[int]]:
        """``(floor, above)``: seqs recorded gone that no reader waits for."""

    def orphans(self, partition: str) -> list[int]:
        """Seqs whose objects are not published and never will be."""

    def remove_orphans(self, partition: str) -> list[int]:
        """Delete the objects of :meth:`orphans`; the seqs removed."""

    def view(self, partition: str) -> PartitionView:
        """What a new reader sees of ``partition``."""

    def listed_view(self, partition: str) -> PartitionView:
        """:meth:`view` from a listing."""

    # -- the MANIFEST kept ----------------------------------------------------------
    def manifest_from_listing(self, partition: str) -> Manifest:
        """The MANIFEST a listing gives (every ``.meta`` read once)."""

    def sync_manifest(self, partition: str, floor: int) -> Manifest | None:
        """Bring ``partition``'s MANIFEST up to what is published (its writer, at open)."""

    def mark_damaged(self, damaged: Iterable[DamagedSegment]) -> None:
        """Record in the MANIFEST segments whose ``.meta`` fails verification."""

    # -- unpublishing -----------------------------------------------------------------
    def prepare_removal(self, partition: str, seqs: Iterable[int]) -> list[int]:
        """While retention plans to delete ``seqs``: what must go before them goes; the
        seqs to hold this pass (what must go could not)."""

    def record_removal(self, partition: str, seqs: Iterable[int]) -> None:
        """Just before retention records ``seqs`` deleted: their removal is kept where
        a MANIFEST rebuilt from a listing finds it."""

    def before_delete(self, partition: str, seqs: list[int]) -> None:
        """:meth:`prepare_removal` for the seqs a retention pass did not just prepare;
        OSError when some must be kept."""

    def unlist(self, partition: str, seqs: list[int], *, reclaimed: bool = False) -> None:
        """Before any file of ``seqs`` goes: they leave the MANIFEST, recorded gone
        (``reclaimed``: by retention, counted in its ``reclaimed`` totals, §11.1)."""


# -- shared by both protocols ---------------------------------------------------------
def manifest_from_survey(
    partition: str,
    survey: SegmentSurvey,
    quarantined: Iterable[int],
    marks: DeletedMarks | None = None,
) -> Manifest:
    """The manifest a listing gives: an entry per published segment (damaged ones
    marked), and every seq up to the highest one listed or quarantined that is not
    published recorded gone, as is every seq the ack log records deleted (``marks``)."""
    # a .meta names its transactions on an object root (§5.3): the rebuilt entries
    # name them too, so a sealed transaction is never sealed again (§10.2)
    entries = [ManifestEntry.from_meta(m, m.txns) for m in survey.metas]
    entries += [
        ManifestEntry(partition, d.seq, d.size_bytes, 0, 0, 0, 0, 0) for d in survey.damaged
    ]
    entries.sort(key=lambda e: e.seq)
    live = {e.seq for e in entries}
    high = max([*live, *quarantined], default=0)
    m = Manifest(partition, high=high, entries=tuple(entries))
    m = m.removed(s for s in range(1, high + 1) if s not in live)
    if marks is not None:  # what the ack log records deleted stays gone (§11.3)
        m = m.with_facts(
            Manifest(
                partition,
                high=marks.highest,
                deleted_floor=marks.floor,
                deleted_above=frozenset(marks.above),
            )
        )
    log.info(
        "quiver.manifest.built partition=%s segments=%d high=%d", partition, len(entries), high
    )
    return m.marked_damaged((d.seq, d.error) for d in survey.damaged)


def manifest_entries(
    files: SegmentFiles, partition: str, m: Manifest
) -> tuple[list[ManifestEntry], list[DamagedSegment]]:
    """``(readable, damaged)``: the entries of ``m``, those marked damaged apart."""
    errors = m.damaged_errors()
    entries = [e for e in m.entries if e.seq not in errors]
    damaged = [
        DamagedSegment(
            partition, e.seq, files.shown_meta(partition, e.seq), errors[e.seq], e.size_bytes
        )
        for e in m.entries
        if e.seq in errors
    ]
    return entries, damaged


def surveyed_view(survey: SegmentSurvey) -> PartitionView:
    """A :class:`PartitionView` of what a listing found (no MANIFEST)."""
    entries = [ManifestEntry.from_meta(m) for m in survey.metas]
    high = max([e.seq for e in entries] + [d.seq for d in survey.damaged], default=0)
    return PartitionView(entries, list(survey.damaged), high, False)


def unlist(
    manifests: ManifestIndex,
    partition: str,
    seqs: list[int],
    build: Build,
    *,
    reclaimed: bool = False,
) -> None:
    """The seqs leave ``partition``'s MANIFEST, recorded gone (so a listing-built or
    re-applied change never brings them back); ``reclaimed`` (retention's deletion):
    in the same write, their entries are counted in its ``reclaimed`` totals (§11.1)."""
    if not seqs:
        return
    manifests.update(partition, lambda m: m.removed(seqs, reclaimed=reclaimed), build=build)


def mark_damaged(
    manifests: ManifestIndex,
    damaged: Iterable[DamagedSegment],
    build: Callable[[str], Manifest],
) -> None:
    """Record in each partition's MANIFEST its segments whose ``.meta`` fails
    verification, so new readers name them without reading every ``.meta``."""
    by_part: dict[str, list[tuple[int, str]]] = {}
    for d in damaged:
        by_part.setdefault(d.partition, []).append((d.seq, d.error))
    for p, found in by_part.items():
        _mark(manifests, p, found, build)


def _mark(
    manifests: ManifestIndex,
    partition: str,
    found: list[tuple[int, str]],
    build: Callable[[str], Manifest],
) -> None:
    manifests.update(
        partition,
        lambda m: m.marked_damaged(found),
        build=lambda: build(partition),
    )
