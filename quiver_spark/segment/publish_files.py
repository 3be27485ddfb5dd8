"""Publication by the ``.meta`` file: a POSIX directory or any fsspec URL
(ARCHITECTURE.md §11.2, §11.1).

A segment is published iff its ``.meta`` exists. The ``.arrow`` is made durable first;
then the ``.meta`` is created (on a local directory: written under a temporary name,
fsynced, renamed, the directory fsynced), and that rename is the publication. One
writer holds a partition (the WAL's flock), so a seq is never taken by anyone else.
The partition's MANIFEST, when the store keeps one, is an index of what the ``.meta``
files published: brought up to date after each publication, and by the partition's
writer at open for a publication that died before its manifest step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..control.manifest import Manifest, ManifestEntry
from ..control.manifest_store import ManifestIndex
from ..control.txn_retirement import TxnRetirement
from ..errors import SegmentExistsError
from ..seams import DeletedMarks
from .backend import Consume
from .files import DamagedSegment, Found, SegmentFiles, SegmentSurvey
from .meta import SegmentMeta
from .publication import (
    PartitionView,
    Publishing,
    manifest_entries,
    manifest_from_survey,
    mark_damaged,
    surveyed_view,
    unlist,
)
from .writer import Serialized


def _never_taken(what: str) -> TypeError:
    return TypeError(
        f"{what}: a segment published by its .meta never has its seq taken by another "
        "holder (one writer holds the partition), so none is voided, moved or staged"
    )


class FilePublication:
    """The ``.meta`` is the publication point; ``manifests`` is an index of what it
    published (:data:`~quiver_spark.control.manifest_store.NO_MANIFESTS`: none is kept,
    every reader lists)."""

    names_txns = False
    needs_deleted_marks = True
    keeps_unpublished = False
    unlisted_txn_ceiling: int | None = None

    def __init__(self, files: SegmentFiles, manifests: ManifestIndex) -> None:
        self._files = files
        self._manifests = manifests
        self.deleted_marks: Callable[[str], DeletedMarks] | None = None
        """Never asked: retention removes a segment's ``.meta`` durably before its
        ``.arrow``, so a listing never finds a deleted segment published."""

    # -- what the partition's writer asks -------------------------------------------
    def fence(self, partition: str) -> Manifest | None:
        """None: the partition's lock makes its writer the only one; no MANIFEST is
        claimed."""
        return None

    def manifest_at_open(self, partition: str, fenced: Manifest | None) -> Manifest | None:
        """The MANIFEST brought up to date (:meth:`sync_manifest`): written from a
        listing if it has none (the one-time upgrade) or is damaged; a segment published
        after its last entry (a publication that died before its manifest step) added."""
        return self.sync_manifest(partition, 0)

    def settle(
        self, meta: SegmentMeta, txns: tuple[int, ...], deleted: DeletedMarks, *, republish: bool
    ) -> Publishing:
        """The ``.meta`` tells (unless ``republish``: written again even if it exists).
        Without one, either a crash between the STATE commit point and publication (the
        ``.arrow`` is there: finish publishing), or the segment was published and
        retention deleted it since (the ack log says so, or the ``.arrow`` is gone;
        retention may die between the two unlinks, leaving the ``.arrow``)."""
        if republish and not deleted.holds(meta.seq):
            return Publishing.AGAIN
        _, meta_path = self._files.paths(meta.partition, meta.seq)
        if self._files.backend.has_file(meta_path):
            return Publishing.PUBLISHED
        if deleted.holds(meta.seq):
            return Publishing.DELETED
        return Publishing.FINISH

    def staged_txns(self, partition: str) -> tuple[int, ...] | None:
        """None: nothing is staged, the WAL is on the store's own disk (§10.2)."""
        return None

    # -- publishing ---------------------------------------------------------------
    def create_arrow(
        self, partition: str, seq: int, fill: Callable[[Consume], Serialized]
    ) -> Serialized:
        """The ``.arrow``, made durable (an orphan of an earlier try is replaced)."""
        arrow_path, _ = self._files.paths(partition, seq)
        return self._files.backend.put(arrow_path, fill, atomic=False)

    def same_or_raise(
        self, partition: str, seq: int, crc: int, size: int, ranges: tuple[tuple[int, int], ...]
    ) -> SegmentMeta:
        """The published metadata when it is this very segment (a retry); else
        SegmentExistsError (sequence reuse), or the CorruptionError of a damaged one."""
        old = self._files.same_segment(partition, seq, crc, size, ranges)
        if old is None:
            raise SegmentExistsError(self._files.shown_meta(partition, seq))
        return old

    def make_meta(
        self, meta: SegmentMeta, txns: tuple[int, ...], sealed_by: int | None
    ) -> bytes | None:
        """The ``.meta`` created, or renamed over one that is there (``again``: a
        publication whose rename may not be durable). Transactions are an object
        root's (§10.2): none is recorded here."""
        encoded = meta.encode()
        _, meta_path = self._files.paths(meta.partition, meta.seq)
        self._files.backend.put(meta_path, lambda consume: consume(memoryview(encoded)))
        return encoded

    def manifest_step(
        self,
        partition: str,
        metas: list[SegmentMeta],
        txns: tuple[int, ...],
        sealed_by: int | None,
        retirement: TxnRetirement,
    ) -> None:
        """The MANIFEST (an index) adds the entries (``txns`` and ``retirement`` are an
        object root's, §10.2: none is recorded here). A failure raises: the caller's
        state is discarded and its recovery adds them (:meth:`sync_manifest`)."""
        entries = [ManifestEntry.from_meta(m) for m in metas]
        self._manifests.update(
            partition,
            lambda m: m.published(entries),
            build=lambda: self.manifest_from_listing(partition),
        )

    def unmake_meta(self, partition: str, seq: int, encoded: bytes) -> None:
        """Never asked: no lease fences this MANIFEST and no seq is void, so a manifest
        step refuses nothing (and the ``.meta`` is the publication)."""

    def void(self, partition: str, seq: int) -> None:
        raise _never_taken("void")

    def move_data(self, meta: SegmentMeta, seq: int) -> SegmentMeta:
        raise _never_taken("move_data")

    def publish_staged(
        self,
        partition: str,
        txn_id: int,
        first_seq: int,
        write: Callable[[int], SegmentMeta],
        publish: Callable[[SegmentMeta], None],
    ) -> SegmentMeta | None:
        raise _never_taken("publish_staged")

    # -- what is published ----------------------------------------------------------
    def published_seqs(self, partition: str) -> list[int]:
        """Every seq with a ``.meta``."""
        return self._files.listing(partition).published

    def published_meta(self, partition: str, seq: int) -> SegmentMeta:
        """The ``.meta`` (cached once verified); SegmentMissingError without one."""
        return self._files.cached(partition, seq) or self._files.read_meta(partition, seq)

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None,
        hints: Mapping[str, int] | None = None,
        *,
        entries: bool = False,
    ) -> dict[str, list[Found | ManifestEntry]]:
        """The ``.meta`` files from each start on, up to the first one missing (the
        ``.meta`` decides: ``hints`` save nothing here, and ``entries`` changes nothing:
        the MANIFEST may lag a publication, §5.4)."""
        del hints, entries
        return {p: list(found) for p, found in self._files.probe_next(starts, skip).items()}

    def manifest_copy(self, partition: str) -> Manifest | None:
        """None: the ``.meta`` decides, not a MANIFEST."""
        return None

    def void_seqs(self, partition: str) -> tuple[int, frozenset[int]]:
        """Nothing: no seq is ever void."""
        return 0, frozenset()

    def orphans(self, partition: str) -> list[int]:
        """Nothing: a ``.meta`` publishes, and an ``.arrow`` without one is
        :meth:`~quiver_spark.segment.catalog.SegmentLocation.cleanup`'s."""
        return []

    def remove_orphans(self, partition: str) -> list[int]:
        return []

    def view(self, partition: str) -> PartitionView:
        """The MANIFEST plus the segments published after its ``high`` (a probe: one
        read for the miss), or the listing without a usable MANIFEST."""
        m = self._manifests.for_reader(partition, lambda: self.manifest_from_listing(partition))
        if m is None:
            return self.listed_view(partition)
        entries, damaged = manifest_entries(self._files, partition, m)
        high = m.high
        for f in self._files.probe_next({partition: m.high + 1}, None)[partition]:
            if isinstance(f, SegmentMeta):
                entries.append(ManifestEntry.from_meta(f))
            else:
                damaged.append(f)
            high = max(high, f.seq)
        return PartitionView(entries, damaged, high, True)

    def listed_view(self, partition: str) -> PartitionView:
        return surveyed_view(self._survey(partition))

    # -- the MANIFEST kept ----------------------------------------------------------
    def manifest_from_listing(self, partition: str) -> Manifest:
        return manifest_from_survey(
            partition, self._survey(partition), self._files.quarantined(partition)
        )

    def sync_manifest(self, partition: str, floor: int) -> Manifest | None:
        """Written from a listing when missing or damaged, and every segment published
        after its ``high`` and not in it yet added (a publication that died before its
        manifest step); seqs below ``floor`` are never probed."""
        self._manifests.forget(partition)

        def add_published(m: Manifest) -> Manifest:
            start = max(m.high, floor) + 1
            found = self._files.probe_next({partition: start}, None)[partition]
            metas = [f for f in found if isinstance(f, SegmentMeta)]
            bad = [(f.seq, f.error) for f in found if isinstance(f, DamagedSegment)]
            if bad:  # still published: an entry that is never chosen, counted
                m = m.published(
                    ManifestEntry(partition, f.seq, f.size_bytes, 0, 0, 0, 0, 0)
                    for f in found
                    if isinstance(f, DamagedSegment)
                ).marked_damaged(bad)
            return m.published(ManifestEntry.from_meta(x) for x in metas)

        return self._manifests.update(
            partition, add_published, build=lambda: self.manifest_from_listing(partition)
        )

    def mark_damaged(self, damaged: Iterable[DamagedSegment]) -> None:
        mark_damaged(self._manifests, damaged, self.manifest_from_listing)

    # -- unpublishing -----------------------------------------------------------------
    def prepare_removal(self, partition: str, seqs: Iterable[int]) -> list[int]:
        """Nothing to remove first: nothing is staged, the WAL is on the store's own
        disk (§10.2); nothing is held."""
        return []

    def record_removal(self, partition: str, seqs: Iterable[int]) -> None:
        """Nothing kept besides the MANIFEST: the ``.meta`` files tell what is
        published, so a MANIFEST rebuilt from a listing needs no GONE (§15.4)."""

    def before_delete(self, partition: str, seqs: list[int]) -> None:
        """Nothing (:meth:`prepare_removal`)."""

    def unlist(self, partition: str, seqs: list[int], *, reclaimed: bool = False) -> None:
        unlist(
            self._manifests, partition, seqs, lambda: self.manifest_from_listing(partition),
            reclaimed=reclaimed,
        )  # fmt: skip

    def _survey(self, partition: str) -> SegmentSurvey:
        return self._files.survey(partition, self.published_seqs(partition), strict=False)
