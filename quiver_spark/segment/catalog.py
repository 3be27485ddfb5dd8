"""The segment catalog: which segments of a store exist, published, damaged or moved
aside, and the order in which their files appear (ARCHITECTURE.md §11.2, §5.4).

Segments of partition ``<pid>`` are ``<location>/<pid>/<seq:020d>.arrow`` plus
``<seq:020d>.meta``; the ``.arrow`` is made durable first. What makes a segment
published is the location's :class:`~quiver_spark.segment.publication.Publication`,
chosen once when it opens: its ``.meta`` on a POSIX or fsspec root
(:class:`~quiver_spark.segment.publish_files.FilePublication`), its partition's
MANIFEST on an object root
(:class:`~quiver_spark.segment.publish_manifest.ManifestPublication`, §11.3). The
bytes move through a :class:`~quiver_spark.segment.backend.SegmentBackend`; the files
are named and read by :class:`~quiver_spark.segment.files.SegmentFiles`.

Callers hold the partition's writer lock for :meth:`SegmentLocation.write`,
:meth:`~SegmentLocation.delete`, :meth:`~SegmentLocation.cleanup` and
:meth:`~SegmentLocation.quarantine`; reads may run concurrently from anywhere.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Iterable, Mapping

import pyarrow as pa

from .. import layout
from ..config import NAME_RE, validate_name
from ..control.manifest import ManifestEntry, ReclaimedTotals
from ..control.manifest_store import NO_MANIFESTS, ManifestIndex, ManifestStore
from ..errors import CorruptionError, SegmentMissingError
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore
from ..seams import DeletedMarks
from ..urls import check_url
from .backend import SegmentBackend
from .backends import open_backend
from .files import DamagedSegment, Found, SegmentFiles, SegmentListing, SegmentSurvey
from .hints import Look, list_hints
from .meta import SegmentMeta
from .objects import ObjectBackend
from .publication import PartitionView, Publication
from .publish_files import FilePublication
from .publish_manifest import ManifestPublication
from .quarantine import move_aside, quarantine_mark, quarantine_note
from .reader import SegmentReader, open_verified
from .removal import CleanupReport, clean_partition, log_vanished
from .writing import SegmentWriting

log = logging.getLogger(__name__)


class SegmentLocation(SegmentWriting):
    """All finalized segments of a store, local, behind fsspec or in an object root.

    Parameters
    ----------
    url
        A local path, ``file://`` URL, an object-store URL (``s3://bucket/prefix``:
        obstore) or any other fsspec URL (``memory://x``).
    io
        File layer for local locations (tests pass a recording or failing subclass).
    storage_options
        The store's storage options: for an object-store URL obstore's keys, checked
        and used as a root's there (``aws_endpoint``, ``retry_timeout``...); for any
        other remote URL its fsspec filesystem's arguments.
    manifests
        The store's per-partition MANIFESTs (§11.1), an index of what the ``.meta``
        files published; :data:`~quiver_spark.control.manifest_store.NO_MANIFESTS`
        (the default): none is kept, every reader lists.

    The segments of an object root are in its own objects: :meth:`in_objects` (a
    store's, published by its MANIFESTs) or :meth:`read_in_objects` (a reader's
    without them). How a
    segment is written and published: :class:`~.writing.SegmentWriting`.
    """

    def __init__(
        self,
        url: str,
        *,
        io: FileIO = DEFAULT_IO,
        storage_options: Mapping[str, object] | None = None,
        manifests: ManifestIndex = NO_MANIFESTS,
    ) -> None:
        check_url("segment.path", url)  # a missing backend or bad URL: one clear error
        files = SegmentFiles(open_backend(url, io=io, storage_options=storage_options))
        self._setup(url, files, manifests, FilePublication(files, manifests))

    @classmethod
    def in_objects(
        cls, objects: ObjectStore, prefix: str, *, url: str, manifests: ManifestStore
    ) -> SegmentLocation:
        """The segments of an object root's store: ``objects``' keys under ``prefix``
        (``url`` only names them), published by each partition's MANIFEST (§11.3)."""
        files = SegmentFiles(ObjectBackend(objects, prefix))
        location = cls.__new__(cls)
        location._setup(url, files, manifests, ManifestPublication(files, manifests))
        return location

    @classmethod
    def read_in_objects(cls, objects: ObjectStore, prefix: str, *, url: str) -> SegmentLocation:
        """The segments of an object root as a reader without the store sees them (an
        executor serving a read task, which opens the segments its plan names by their
        metadata): no MANIFEST is read or written, a segment's ``.meta`` and the
        listing are all it goes by."""
        files = SegmentFiles(ObjectBackend(objects, prefix))
        location = cls.__new__(cls)
        location._setup(url, files, NO_MANIFESTS, FilePublication(files, NO_MANIFESTS))
        return location

    def _setup(
        self,
        url: str,
        files: SegmentFiles,
        manifests: ManifestIndex,
        publication: Publication,
    ) -> None:
        self.url = url
        self.manifests = manifests
        """The store's per-partition MANIFESTs (§11.1); NO_MANIFESTS: every reader lists."""
        self._b = files.backend
        self._files = files
        self._publication = publication
        self.quarantined_total = 0
        """Segments quarantined through this instance (a metric for the store)."""
        self._hinted = {}
        self._dirs: builtins.list[str] | None = None
        """The partitions :meth:`partitions` last listed."""
        self._views: dict[str, tuple[float, PartitionView]] = {}
        """Per partition, the last :meth:`view` taken and when (monotonic seconds)."""

    def __repr__(self) -> str:
        return f"SegmentLocation({self.url!r})"

    @property
    def deleted_marks(self) -> Callable[[str], DeletedMarks] | None:
        """The ack log's record of a partition's deleted segments (set by the store
        when it has one): a listing that decides a partition (no readable MANIFEST)
        never publishes again a seq retention recorded deleted, whose objects a failed
        delete may have left (§11.1, §11.3)."""
        return self._publication.deleted_marks

    @deleted_marks.setter
    def deleted_marks(self, marks: Callable[[str], DeletedMarks] | None) -> None:
        self._publication.deleted_marks = marks

    @property
    def publication(self) -> Publication:
        """What makes a segment of this location published (§11.2, §11.3), and what the
        partition's writer does differently because of it: the one place it asks."""
        return self._publication

    @property
    def backend(self) -> SegmentBackend:
        """The storage this catalog moves bytes through."""
        return self._b

    def look(self) -> Look | None:
        """One listing of the location's publication hints (§12): every partition's
        newest hint and the version of the quarantine's; the partitions are those this
        instance last listed (listed now if never) and every hinted one. None where the
        storage cannot list a level (then :meth:`partitions` and a probe of each)."""
        if not self._b.lists_levels:
            return None
        got = list_hints(self._b)
        if got is None:
            return None
        hints, mark = got
        dirs = self._dirs if self._dirs is not None else self.partitions()
        return Look(sorted({*dirs, *hints}), mark, hints)

    # -- the manifest (§11.1) ----------------------------------------------------------
    def reclaimed_totals(self, partition: str) -> ReclaimedTotals | None:
        """What retention's deletions took out of ``partition``'s MANIFEST since it
        began counting (§11.1, one GET); None without a manifest store, without a
        MANIFEST, or when it fails verification."""
        try:
            m = self.manifests.read(partition)
        except CorruptionError:
            return None
        return None if m is None else m.reclaimed

    def seals_txn(self, partition: str, txn_id: int) -> bool:
        """Object root: whether the MANIFEST this handle last read or wrote for
        ``partition`` says staged transaction ``txn_id`` needs no seal (§10.2)."""
        copy = self._publication.manifest_copy(partition)
        return copy is not None and copy.seals(txn_id)

    def view(self, partition: str, *, reuse_s: float | None = None) -> PartitionView:
        """What a new reader sees of ``partition``: its MANIFEST (one read; written from
        a listing by ``create`` when it has none, the one-time upgrade) and (POSIX
        root) the segments published after its ``high`` (a probe: one read for the
        miss), or the listing when there is no manifest store or the manifest is
        damaged (counted and logged; the next writer or retention pass rewrites it).
        ``reuse_s``: the view this instance took less than that many seconds ago
        serves instead (a new consumer's first plan right after its first retention
        pass read every MANIFEST)."""
        validate_name("partition", partition)
        now = time.monotonic()
        if reuse_s is not None and partition in self._views:
            at, seen = self._views[partition]
            if now - at < reuse_s:
                return seen
        got = self._publication.view(partition)
        self._views[partition] = (now, got)
        return got

    def listed_view(self, partition: str) -> PartitionView:
        """:meth:`view` from a listing, every ``.meta`` read (cached once read). On an
        object root this listing (the periodic safety net, ``quiver gc --full``) also
        removes the orphans of other lease holders (:meth:`remove_orphans`)."""
        return self._publication.listed_view(partition)

    def mark_damaged(self, damaged: Iterable[DamagedSegment]) -> None:
        """Record in the MANIFEST segments whose ``.meta`` was found failing
        verification, so new readers name them without reading every ``.meta``."""
        self._publication.mark_damaged(damaged)

    def is_published(self, partition: str, seq: int) -> bool:
        """Whether segment ``seq`` of ``partition`` has its ``.meta`` (is visible)."""
        return self._b.has_file(self._paths(partition, seq)[1])

    # -- reading ------------------------------------------------------------------
    def partitions(self) -> list[str]:
        """Partition ids that have a segment directory (valid names only), sorted."""
        found = sorted(n for n in self._b.subdirs(self._b.root) if NAME_RE.fullmatch(n))
        self._dirs = found
        return list(found)

    def published_seqs(self, partition: str) -> list[int]:
        """Seqs of the published segments of ``partition``, sorted, from one listing
        (no ``.meta`` is read or verified); on an object root only those its MANIFEST
        lists (one more read; §11.3)."""
        return self._publication.published_seqs(partition)

    def void_seqs(self, partition: str) -> tuple[int, frozenset[int]]:
        """``(floor, above)``: on an object root the seqs its MANIFEST records gone
        (deleted, moved aside or void: never published), from the copy at hand; every
        seq <= ``floor`` and those in ``above``. Nothing on a POSIX root."""
        return self._publication.void_seqs(partition)

    def orphans(self, partition: str) -> builtins.list[int]:
        """Object root: seqs with objects (``.arrow`` or ``.meta``) the MANIFEST does not
        list, that are void or below its ``high`` (never seqs above it: a publication
        may be between its ``.meta`` and its manifest step), from one listing and one
        read. Nothing on a POSIX root or without a readable MANIFEST."""
        return self._publication.orphans(partition)

    def remove_orphans(self, partition: str) -> builtins.list[int]:
        """Object root: delete the objects of :meth:`orphans` (``.meta`` first, as a
        deletion does). Returns the seqs removed."""
        return self._publication.remove_orphans(partition)

    def listing(self, partition: str) -> SegmentListing:
        """Published and unpublished segment seqs of ``partition`` from one listing."""
        return self._files.listing(partition)

    def data_path(self, partition: str, seq: int) -> str:
        """Where segment ``seq``'s ``.arrow`` is (or would be), as messages show it."""
        return self._b.display(self._paths(partition, seq)[0])

    def quarantined(self, partition: str) -> dict[int, str]:
        """Seqs of ``partition`` with a file in ``quarantine/``, each mapped to the file
        that says why (its ``.reason`` when there is one), from one listing."""
        return {
            seq: self._b.display(raw) for seq, raw in self._files.quarantined(partition).items()
        }

    def quarantine_mark(self) -> bytes | None:
        """The bytes of the location's quarantine mark (§5.4), None if nothing was ever
        quarantined here: one small read. A reader that remembers them knows, by
        comparing, whether any segment was moved aside since it last looked."""
        return quarantine_mark(self._b)

    def quarantine_note(self, partition: str, seq: int) -> str:
        """The reason text recorded when ``seq`` was quarantined ("" if none is readable)."""
        return quarantine_note(self._files, partition, seq)

    def list(self, partition: str) -> list[SegmentMeta]:
        """Published segments of ``partition`` sorted by seq; a corrupt ``.meta`` raises.

        For readers that must not skip anything. Maintenance that must go on around
        damage (retention, status) uses :meth:`survey`.
        """
        survey = self._survey(partition, strict=True)
        return survey.metas

    def survey(self, partition: str) -> SegmentSurvey:
        """Like :meth:`list`, but a ``.meta`` that fails verification is reported in
        ``damaged`` (file, error, ``.arrow`` size) instead of raising, so one damaged
        segment never hides the others. Nothing is moved or deleted."""
        return self._survey(partition, strict=False)

    def _survey(self, partition: str, *, strict: bool) -> SegmentSurvey:
        validate_name("partition", partition)
        listed = self.published_seqs(partition)  # on an object root: those the MANIFEST lists
        # each .meta through read_meta, as every read this location makes for a caller
        return self._files.survey(partition, listed, strict=strict, read=self.read_meta)

    def probe(self, partition: str, seq: int, *, strict: bool = False) -> Found | None:
        """Segment ``seq`` of ``partition`` if it is published: its metadata (verified
        once, then cached: a published ``.meta`` never changes), or a
        :class:`DamagedSegment` when the ``.meta`` fails verification (raised instead
        with ``strict``); None when it is not published. One read when not cached."""
        return self._files.probe(partition, seq, strict=strict, read=self.read_meta)

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None = None,
        *,
        hints: Mapping[str, int] | None = None,
        entries: bool = False,
    ) -> dict[str, builtins.list[Found | ManifestEntry]]:
        """For each partition, the segments published from seq ``starts[p]`` on, up to
        the first one that is not (seqs are gapless, §5): what was published since a
        reader last looked. ``skip(p, seq)`` true passes over a seq known to be gone
        (asked first: cached metadata of a segment deleted since is not served).

        One read per new segment plus one per partition for the miss; on an object
        store each round's reads (one per partition) are sent together. On an object
        root a segment counts only if the partition's MANIFEST lists it: a ``.meta``
        the copy at hand does not list makes the probe read the MANIFEST again (one
        read), and what it lists from ``starts[p]`` on is the answer (§11.3).

        ``hints`` (each partition's newest publication hint, from a :meth:`look` just
        taken) spare that read on an object root: a partition whose MANIFEST copy at
        hand reaches its hint is answered with no request, one below it is read
        again without a HEAD first (§12).

        ``entries`` (a retention pass's index, §15.1): on an object root each segment
        the MANIFEST lists is answered with its entry (size, rows, ingestion and event
        times), no ``.meta`` read; the ``.meta`` of one the pass chooses is read by
        :meth:`check_before_delete`. On a POSIX root the ``.meta`` is read as before
        (it is the publication point there; the MANIFEST may lag).
        """
        return self._publication.probe_next(starts, skip, hints, entries=entries)

    def cached(self, partition: str, seq: int) -> SegmentMeta | None:
        """Metadata this instance already verified (no request), or None."""
        return self._files.cached(partition, seq)

    def forget(self, partition: str, seqs: Iterable[int]) -> None:
        """Drop cached metadata of segments known to be gone."""
        self._files.forget(partition, seqs)

    def published_meta(self, partition: str, seq: int) -> SegmentMeta:
        """The metadata of segment ``seq`` if it is published (cached once verified);
        SegmentMissingError if not. On an object root it must be listed by the
        MANIFEST: one the copy at hand does not list makes it read the MANIFEST again
        (a ``.meta`` no MANIFEST lists is an orphan, §11.3)."""
        return self._publication.published_meta(partition, seq)

    def read_meta(self, partition: str, seq: int) -> SegmentMeta:
        """The published metadata of one segment; SegmentMissingError if unpublished."""
        return self._files.read_meta(partition, seq)

    def open(self, meta: SegmentMeta, *, verify: bool = True) -> SegmentReader:
        """Open a published segment; with ``verify`` its size and CRC-32C are checked
        against ``meta`` before any batch can be read."""
        arrow_path, _ = self._paths(meta.partition, meta.seq)
        shown = self._b.display(arrow_path)
        try:
            data = self._b.buffer(arrow_path)
        except FileNotFoundError as e:
            log.warning("quiver.segment.missing path=%s", shown)
            raise SegmentMissingError(meta.partition, meta.seq, f"missing ({shown})") from e
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptionError(shown, 0, f"segment unreadable: {e}") from e
        return open_verified(shown, data, meta, verify_crc=verify)

    def total_bytes(self, partition: str | None = None) -> int:
        """Bytes of published segments (``.arrow`` plus ``.meta``), from directory listings."""
        parts = self.partitions() if partition is None else [validate_name("partition", partition)]
        return sum(sum(self.published_sizes(p).values()) for p in parts)

    def published_sizes(self, partition: str) -> dict[int, int]:
        """``{seq: bytes}`` of each published segment of ``partition``: its ``.arrow``
        plus its ``.meta`` on disk (damaged ones included), from one listing."""
        validate_name("partition", partition)
        entries = self._b.entries(self._b.join(partition), sizes=True)
        sizes = {s: 0 for n in entries if (s := layout.parse_segment_meta(n))}
        for n, size in entries.items():
            seq = layout.parse_segment_data(n) or layout.parse_segment_meta(n)
            if seq in sizes:
                sizes[seq] += size
        return sizes

    # -- removing -----------------------------------------------------------------
    def delete(self, partition: str, seqs: Iterable[int]) -> None:
        """Unpublish (every ``.meta``, durably) then remove the ``.arrow`` files.

        Idempotent: missing files are ignored.
        """
        seqs = list(seqs)
        self._publication.before_delete(partition, seqs)
        self.forget(partition, seqs)
        self._publication.unlist(partition, seqs, reclaimed=True)
        pairs = [self._paths(partition, s) for s in seqs]
        self._b.remove([m for _, m in pairs])
        self._b.remove([a for a, _ in pairs])
        log.info("quiver.segment.delete partition=%s seqs=%d", partition, len(pairs))

    def check_before_delete(
        self,
        deletions: Mapping[str, Iterable[int]],
        *,
        recorded: Callable[[str], DeletedMarks] | None = None,
    ) -> tuple[dict[str, builtins.list[int]], builtins.list[DamagedSegment]]:
        """Before retention records and deletes what it chose from a manifest view:
        ``(gone, damaged)``, the chosen seqs whose ``.meta`` is no longer there
        (dropped from the manifest here) and those whose ``.meta`` fails verification
        (the evidence is never deleted). One existence check per chosen segment whose
        metadata this instance verified, one read for the others.

        A gone seq is logged ``quiver.segment.vanished``: at DEBUG when ``recorded``
        (the ack log's deleted marks, read afresh; called only when something is gone)
        holds it, another retention pass having deleted it first (on an object root
        two processes' passes may choose the same segment, §13.7: nothing is lost);
        at WARNING otherwise (removed outside retention: a subscriber that had not
        read it meets it as data loss)."""
        gone: dict[str, builtins.list[int]] = {}
        damaged: builtins.list[DamagedSegment] = []
        for p, seqs in deletions.items():
            for seq in seqs:
                if self.cached(p, seq) is not None:
                    if self.is_published(p, seq):
                        continue
                    found: SegmentMeta | DamagedSegment | None = None
                else:
                    found = self.probe(p, seq)
                if found is None:
                    gone.setdefault(p, []).append(seq)
                elif isinstance(found, DamagedSegment):
                    damaged.append(found)
        for p, seqs in gone.items():
            log_vanished(p, seqs, recorded)
            self.forget(p, seqs)
            self._publication.unlist(p, seqs)
        if damaged:
            self.mark_damaged(damaged)
        return gone, damaged

    def prepare_removal(self, partition: str, seqs: Iterable[int]) -> builtins.list[int]:
        """Object root, while retention plans to delete ``seqs``: the staged objects
        still left for the transactions they hold are removed (a writer's drop after
        sealing is best effort; once the segments are gone a MANIFEST rebuilt from a
        listing could not name those transactions, and a leftover would be sealed
        again, §10.2): one LIST of ``txns/`` when they name transactions, one DELETE per
        leftover. Removing a leftover is harmless even if the segment then stays (its
        transaction is sealed: the MANIFEST names it). Once the plan is final,
        :meth:`record_removal` keeps the removal in GONE.

        Returns the seqs to hold this pass (logged ``quiver.gc.held``): those naming a
        transaction whose leftover could not be removed (all that name one when the
        LIST failed). Nothing raises. Nothing on a POSIX root."""
        return self._publication.prepare_removal(partition, seqs)

    def record_removal(self, partition: str, seqs: Iterable[int]) -> None:
        """Object root, just before retention records ``seqs`` deleted (the plan's
        last word): join their removal (seqs gone, the high, the transactions they
        held, retired) into the partition's GONE (§15.4), so that a MANIFEST rebuilt
        later never brings them back, whatever happens to the pass after. OSError when
        GONE cannot be written: the caller keeps these segments this pass. Nothing on
        a POSIX root."""
        self._publication.record_removal(partition, seqs)

    def finish_deletes(self, partition: str, seqs: Iterable[int]) -> builtins.list[int]:
        """Remove the ``.arrow`` left by a deletion that died between its unlinks, for
        ``seqs`` the caller knows were deleted (the ack log records them and their
        ``.meta`` is gone): one existence check each. Returns the seqs finished."""
        left = [q for q in seqs if self._b.has_file(self._paths(partition, q)[0])]
        if left:
            self._b.remove([self._paths(partition, q)[0] for q in left])
            log.info("quiver.segment.delete_finished partition=%s seqs=%s", partition, left)
        return left

    def cleanup(self, partition: str, *, unpublished: bool | None = None) -> CleanupReport:
        """Remove ``*.tmp`` files and (``unpublished``) unpublished ``.arrow`` files of
        ``partition``.

        ``max_seq_seen`` is the highest seq of any segment file found, orphans and
        quarantined ones included, so the store's sequence floor never reuses one.
        ``unpublished`` defaults to what the publication says
        (:attr:`~.publication.Publication.keeps_unpublished`): on an object root a
        writer never removes an object it did not publish (another holder's upload in
        flight), and starts above every seq seen instead (§11.3).
        """
        if unpublished is None:
            unpublished = not self._publication.keeps_unpublished
        return clean_partition(self._b, partition, unpublished=unpublished)

    def quarantine(self, partition: str, seq: int, reason: str) -> str:
        """Move a damaged segment's files to ``<pid>/quarantine/`` with a reason file.

        The ``.meta`` moves first (unpublishing the segment), then the ``.arrow``.
        Returns where the ``.arrow`` went (or the ``.meta`` if there was no ``.arrow``).
        """
        self.forget(partition, [seq])
        self._publication.unlist(partition, [seq])
        shown = move_aside(self._files, partition, seq, reason)
        self.quarantined_total += 1
        return shown
