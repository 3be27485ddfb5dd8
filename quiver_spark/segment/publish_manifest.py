"""Publication by the MANIFEST: an object root (ARCHITECTURE.md §11.3, §10.2, §16.2).

A segment is published iff its partition's MANIFEST lists it. Its objects are created
first, each only if absent (``.arrow``, then a ``.meta`` naming its transactions and
its publisher's epoch), then the MANIFEST change (If-Match its version) publishes it.
Several lease holders may write a partition one after the other, a paused one late:

- a MANIFEST of a later epoch refuses an earlier holder's change (fencing, §16.2), and
  the ``.meta`` that holder made is removed again when nothing lists it;
- objects this writer did not make make their seq taken (:class:`SeqTakenError`): the
  seq is recorded void in the MANIFEST and the segment goes to the next seq;
- a ``.meta`` the MANIFEST does not list is an orphan, never read, and removed by the
  safety net (:meth:`ManifestPublication.remove_orphans`);
- without a readable MANIFEST the files decide, less the seqs the ack log records
  deleted and the fenced holders' orphans, and the MANIFEST is rebuilt from them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from .. import layout
from ..config import validate_name
from ..control.manifest import Manifest, ManifestEntry
from ..control.manifest_store import ManifestStore
from ..control.txn_retirement import TxnRetirement
from ..errors import (
    CorruptionError,
    LostRaceError,
    RemovalHeldError,
    SegmentMissingError,
    SeqTakenError,
)
from ..format import checksum
from ..seams import DeletedMarks
from ..staging import drop_staged, staged_ids
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

log = logging.getLogger(__name__)

_SEQS_TAKEN_IN_A_ROW = 24
"""Seqs in a row a sealer finds taken (another holder's objects) before it gives up
(an ``OSError``: the next pass tries again)."""


def _copied(consume: Consume, data: bytes, meta: SegmentMeta) -> Serialized:
    """Fill an upload with the bytes of segment ``meta`` (checked by their CRC-32C)."""
    crc = checksum(data)
    if crc != meta.checksum:
        raise CorruptionError(
            f"{meta.partition}/{meta.seq}",
            0,
            f"segment bytes crc {crc:#x}, meta {meta.checksum:#x}",
        )
    consume(memoryview(data))
    return Serialized(len(data), crc, meta.batches, meta.rows)


class ManifestPublication:
    """The MANIFEST is the publication point (``manifests``: the store's, whose
    ``objects`` hold the staged transactions too)."""

    names_txns = True
    needs_deleted_marks = False
    keeps_unpublished = True
    unlisted_txn_ceiling: int | None = 0

    def __init__(self, files: SegmentFiles, manifests: ManifestStore) -> None:
        self._files = files
        self._manifests = manifests
        self.deleted_marks: Callable[[str], DeletedMarks] | None = None
        """The ack log's record of a partition's deleted segments (set by the store
        when it has one): a listing that decides a partition (no readable MANIFEST)
        never publishes again a seq retention recorded deleted, whose objects a failed
        delete may have left (§11.1, §11.3)."""
        # partition -> the MANIFEST as this instance last read or wrote it: what the
        # probes accept without reading it again
        self._copies: dict[str, Manifest] = {}
        # seqs a retention pass just prepared for removal (prepare_removal), and the
        # transactions each of them names
        self._prepared: dict[str, set[int]] = {}
        self._named: dict[str, dict[int, set[int]]] = {}

    # -- what the partition's writer asks -------------------------------------------
    def fence(self, partition: str) -> Manifest | None:
        """The MANIFEST read again and brought to the writer's epoch (:meth:`sync_manifest`):
        every earlier holder's manifest change fails from here on, and a higher epoch
        there fences this writer (§16.2)."""
        return self.sync_manifest(partition, 0)

    def manifest_at_open(self, partition: str, fenced: Manifest | None) -> Manifest | None:
        """The MANIFEST the writer fenced, as its own publications since left it; nothing
        added: a ``.meta`` it does not list is not published (§11.3)."""
        return self._copies.get(partition) or fenced

    def settle(
        self, meta: SegmentMeta, txns: tuple[int, ...], deleted: DeletedMarks, *, republish: bool
    ) -> Publishing:
        """The writer's STATE is the one word that the segment is its own: published as
        such (moved when another holder's objects took its seq), unless retention
        deleted it since or a sealer published some of its transactions from their
        staged objects while this writer was away (one GET of the MANIFEST when STATE
        names transactions)."""
        taken = set(txns) & self._sealed_txns(meta.partition) if txns else set()
        if deleted.holds(meta.seq):
            return Publishing.DELETED
        if taken:
            log.warning(
                "quiver.recovery.sealed_elsewhere partition=%s seq=%d txns=%s",
                meta.partition,
                meta.seq,
                sorted(taken),
            )
            return Publishing.SEALED_ELSEWHERE
        return Publishing.OWN

    def _sealed_txns(self, partition: str) -> set[int]:
        """The transaction ids the partition's MANIFEST records (one GET)."""
        try:
            m = self._manifests.read(partition)
        except CorruptionError:
            return set()
        return m.sealed_txns() if m is not None else set()

    def staged_txns(self, partition: str) -> tuple[int, ...] | None:
        """One LIST of ``txns/``."""
        return tuple(staged_ids(self._manifests.objects, partition))

    # -- publishing ---------------------------------------------------------------
    def create_arrow(
        self, partition: str, seq: int, fill: Callable[[Consume], Serialized]
    ) -> Serialized:
        """Create ``<seq>.arrow``. Other bytes there (another holder's upload, published
        or not) make the seq taken (:class:`SeqTakenError`): the caller records it void
        and moves on. Never removed here: the holder that made them may be the
        partition's newest, and a delete has no condition the storage could check, so a
        paused holder's late delete would land on its successor's object (§11.3)."""
        arrow_path, _ = self._files.paths(partition, seq)
        try:
            return self._files.backend.put(arrow_path, fill, atomic=False)
        except FileExistsError:
            shown = self._files.backend.display(arrow_path)
            log.info(
                "quiver.segment.foreign_arrow partition=%s seq=%d path=%s: seq taken",
                partition,
                seq,
                shown,
            )
            raise SeqTakenError(shown, partition, seq) from None

    def same_or_raise(
        self, partition: str, seq: int, crc: int, size: int, ranges: tuple[tuple[int, int], ...]
    ) -> SegmentMeta:
        """The published metadata when it is this very segment (a retry); else
        SeqTakenError: another holder's ``.meta``, damaged or not."""
        shown = self._files.shown_meta(partition, seq)
        try:
            old = self._files.same_segment(partition, seq, crc, size, ranges)
        except CorruptionError:
            raise SeqTakenError(shown, partition, seq) from None
        if old is None:
            raise SeqTakenError(shown, partition, seq)
        return old

    def make_meta(
        self, meta: SegmentMeta, txns: tuple[int, ...], sealed_by: int | None
    ) -> bytes | None:
        """Create the ``.meta`` (naming ``txns`` and the publisher's epoch), after one
        look at the MANIFEST's fence: a holder fenced before this point leaves no
        ``.meta`` (§16.2). A seq recorded void meanwhile, or another holder's
        ``.meta`` there, is taken (:class:`SeqTakenError`)."""
        encoded = self._as_published(meta, txns, sealed_by).encode()
        _, meta_path = self._files.paths(meta.partition, meta.seq)
        standing = self._manifests.check_fence(meta.partition)
        if standing is not None and standing.deleted(meta.seq) and not standing.lists(meta.seq):
            # recorded gone (void) meanwhile: its .meta would only be an orphan beside
            # the segment's moved copy (§11.3)
            raise SeqTakenError(self._files.backend.display(meta_path), meta.partition, meta.seq)
        try:
            self._files.backend.put(meta_path, lambda consume: consume(memoryview(encoded)))
        except FileExistsError:
            self.same_or_raise(
                meta.partition, meta.seq, meta.checksum, meta.size_bytes, meta.wal_ranges
            )
            return None
        return encoded

    def manifest_step(
        self,
        partition: str,
        metas: list[SegmentMeta],
        txns: tuple[int, ...],
        sealed_by: int | None,
        retirement: TxnRetirement,
    ) -> None:
        """The publication: the entries (naming ``txns``, §10.2) go into the MANIFEST
        with the transactions ``retirement`` retires (joined with those it retires),
        and the seqs the writer passed over are recorded void. A staged transaction
        sealed already is never sealed twice (``sealed_by``: a sealer's epoch). A
        writer's own segment the MANIFEST does not list afterwards had its seq recorded
        void by another holder while this writer was away: SeqTakenError, the writer
        moves the segment (§11.3). A later epoch in the MANIFEST raises FencedError."""
        if not txns:
            sealed_by = None
        entries = [
            ManifestEntry.from_meta(self._as_published(m, txns, sealed_by), txns, sealed_by)
            for m in metas
        ]

        def change(m: Manifest) -> Manifest:
            if sealed_by is not None and any(m.seals(t) for t in txns):
                return m  # a staged transaction sealed already: never twice
            return m.published(entries, void_gaps=True).with_retirement(retirement)

        out = self._manifests.update(
            partition, change, build=lambda: self.manifest_from_listing(partition)
        )
        self._copies[partition] = out
        if sealed_by is None:
            for m in metas:
                if not out.lists(m.seq):
                    _, meta_path = self._files.paths(partition, m.seq)
                    raise SeqTakenError(self._files.backend.display(meta_path), partition, m.seq)

    def unmake_meta(self, partition: str, seq: int, encoded: bytes) -> None:
        """A publication refused (fenced, or its seq recorded void): the ``.meta`` this
        call made is removed unless the MANIFEST lists the seq after all (a publication
        that landed before a successor's change built on it). Its seq is never used
        again by anyone, so the delete, however late, meets no one else's object; what
        it saves is a listing's mistake while the MANIFEST is unreadable (§11.3). Best
        effort: a failure leaves an orphan for gc."""
        _, meta_path = self._files.paths(partition, seq)
        try:
            m = self._manifests.read(partition)
            if m is not None and m.lists(seq):
                return
            got = self._files.backend.read(meta_path)
            if got == encoded:
                self._files.backend.remove([meta_path])
                log.info("quiver.segment.unmade partition=%s seq=%d", partition, seq)
        except (OSError, CorruptionError, SegmentMissingError) as e:
            log.info("quiver.segment.unmake_failed partition=%s seq=%d: %s", partition, seq, e)

    def _as_published(
        self, meta: SegmentMeta, txns: tuple[int, ...], sealed_by: int | None
    ) -> SegmentMeta:
        """The ``.meta`` names the transactions it holds and the epoch of its publisher,
        as its MANIFEST entry will (§5.3), so that a listing deciding the partition (no
        readable MANIFEST) can pass over a fenced holder's orphan."""
        epoch = sealed_by if sealed_by is not None else self._manifests.epoch_of(meta.partition)
        return replace(meta, txns=tuple(txns), epoch=epoch)

    def void(self, partition: str, seq: int) -> None:
        """Record ``seq`` void in the MANIFEST (gone: never published, never waited
        for, never a loss). FencedError when a later lease holder wrote it."""
        log.warning("quiver.segment.void partition=%s seq=%d", partition, seq)
        self._copies[partition] = self._manifests.update(
            partition,
            lambda m: m if m.lists(seq) else m.removed([seq]),
            build=lambda: self.manifest_from_listing(partition),
        )

    def move_data(self, meta: SegmentMeta, seq: int) -> SegmentMeta:
        """The bytes of this writer's segment ``meta`` (whose ``.meta`` key another
        holder took) uploaded again as segment ``seq`` (same content, same checksum);
        :class:`SeqTakenError` when ``seq`` is taken too."""
        arrow_path, _ = self._files.paths(meta.partition, meta.seq)
        data = self._files.backend.read(arrow_path)
        if len(data) != meta.size_bytes:
            raise SegmentMissingError(
                meta.partition,
                meta.seq,
                f"not movable ({self._files.backend.display(arrow_path)} holds {len(data)} "
                f"bytes, expected {meta.size_bytes})",
                kind="corrupt",
            )
        new = replace(meta, seq=seq, created_ns=time.time_ns())
        _, meta_path = self._files.paths(meta.partition, seq)
        if self._files.backend.exists(meta_path):
            raise SeqTakenError(self._files.backend.display(meta_path), meta.partition, seq)
        self.create_arrow(meta.partition, seq, lambda consume: _copied(consume, data, meta))
        log.info(
            "quiver.segment.moved partition=%s from_seq=%d to_seq=%d", meta.partition, meta.seq, seq
        )
        return new

    def publish_staged(
        self,
        partition: str,
        txn_id: int,
        first_seq: int,
        write: Callable[[int], SegmentMeta],
        publish: Callable[[SegmentMeta], None],
    ) -> SegmentMeta | None:
        """The MANIFEST step is the publication: it records the transaction in the
        entry and is a no-op when the transaction is sealed already (None then). A
        taken seq is recorded void and the next one used (from the MANIFEST's next
        seq, never below ``first_seq``: the partition's writer's next)."""
        self._manifests.forget(partition)
        current = self._manifests.update(
            partition, lambda m: m, build=lambda: self.manifest_from_listing(partition)
        )
        if current.seals(txn_id):
            return None
        seq = max(current.high + 1, first_seq)
        for _ in range(_SEQS_TAKEN_IN_A_ROW):
            try:
                meta = write(seq)
                publish(meta)
            except SeqTakenError:
                self.void(partition, seq)
                seq += 1
                continue
            published = self._copies.get(partition)
            if published is None or not published.lists(meta.seq):
                return None  # sealed meanwhile under another entry: this seq stays an orphan
            return meta
        raise LostRaceError(partition, f"partition {partition}: seqs taken in a row up to {seq}")

    # -- what is published ----------------------------------------------------------
    def published_seqs(self, partition: str) -> list[int]:
        """Those with a ``.meta`` that the MANIFEST lists (one read more than the
        listing); without a readable MANIFEST, those the files decide (§11.1)."""
        listed = self._files.listing(partition).published
        m = self._deciding(partition)
        if m is None:
            return self._without_fenced_orphans(partition, self._without_deleted(partition, listed))
        return [s for s in listed if m.lists(s)]

    def published_meta(self, partition: str, seq: int) -> SegmentMeta:
        """A seq the copy at hand does not list makes it read the MANIFEST again (a
        ``.meta`` no MANIFEST lists is an orphan)."""
        copy = self._copies.get(partition)
        if copy is None or not copy.lists(seq):
            m = self._deciding(partition)
            if m is not None and not m.lists(seq):
                raise SegmentMissingError(
                    partition,
                    seq,
                    f"not published ({self._manifests.display(partition)} does not list it)",
                )
        return self._files.cached(partition, seq) or self._files.read_meta(partition, seq)

    def probe_next(
        self,
        starts: Mapping[str, int],
        skip: Callable[[str, int], bool] | None,
        hints: Mapping[str, int] | None = None,
        *,
        entries: bool = False,
    ) -> dict[str, list[Found | ManifestEntry]]:
        """What each partition's MANIFEST lists from ``starts[p]`` on (:meth:`_listed`);
        with ``entries``, its entries as they are (no ``.meta`` read)."""
        hints = hints or {}
        return {
            validate_name("partition", p): self._listed(p, start, skip, hints.get(p), entries)
            for p, start in starts.items()
        }

    def _listed(
        self,
        partition: str,
        start: int,
        skip: Callable[[str, int], bool] | None,
        hint: int | None = None,
        entries: bool = False,
    ) -> list[Found | ManifestEntry]:
        """The segments ``partition``'s MANIFEST lists from ``start`` on. The copy at
        hand answers while the MANIFEST's version is still its own (one HEAD: the whole
        cost of an idle poll); else the MANIFEST is read again (one GET). No ``.meta``
        is probed: a seq a successor passed over (void, perhaps with no ``.meta`` at
        all) never holds a reader back (§11.3).

        ``hint``, the partition's newest publication hint as just listed (§12), spares
        the HEAD: a copy whose ``high`` reaches it already holds every seq announced
        (a publication's hint comes before it; a later one's is above: the next
        listing names it), so it answers with no request; a copy below it is read
        again at once (one GET). A seq removed since the copy was read is what
        ``skip`` and the ack log's deleted marks tell.

        ``entries`` (a retention pass's index, §15.1): each listed segment is its
        MANIFEST entry (size, rows, ingestion and event times: what the index keeps),
        one marked damaged a :class:`DamagedSegment`, and no ``.meta`` is read; the
        ``.meta`` of a segment the pass chooses is read when it is checked before
        deletion. Without ``entries`` each one's ``.meta`` is read (cached once
        verified) and one that is gone is passed over. A partition with no readable
        MANIFEST is probed in its files either way."""
        copy = self._copies.get(partition)
        m: Manifest | None = copy
        if hint is not None and copy is not None and hint <= copy.high:
            pass
        elif hint is not None:
            m = self._deciding(partition)
        elif (
            copy is None
            or copy.version is None
            or (self._manifests.objects.head(layout.manifest(partition)) != copy.version)
        ):
            m = self._deciding(partition)
        if m is None:  # no readable MANIFEST: the files decide (§11.1)
            found = self._files.probe_next({partition: start}, skip)[partition]
            seqs = self._without_deleted(partition, [f.seq for f in found])
            kept = set(self._without_fenced_orphans(partition, seqs))
            return [f for f in found if f.seq in kept]
        out: list[Found | ManifestEntry] = []
        errors = m.damaged_errors() if entries else {}
        for e in m.entries:
            if e.seq < start or (skip is not None and skip(partition, e.seq)):
                continue
            if entries:
                error = errors.get(e.seq)
                if error is None:
                    out.append(e)
                else:
                    shown = self._files.shown_meta(partition, e.seq)
                    out.append(DamagedSegment(partition, e.seq, shown, error, e.size_bytes))
                continue
            got = self._files.probe(partition, e.seq)
            if got is not None:
                out.append(got)
        return out

    def _deciding(self, partition: str, *, fresh: bool = True) -> Manifest | None:
        """The MANIFEST that decides what is published (read again unless ``fresh`` is
        False and a copy is at hand); None when the partition has no readable MANIFEST
        (a store not upgraded yet, a damaged one: the files decide, §11.1)."""
        if not fresh and partition in self._copies:
            return self._copies[partition]
        try:
            m = self._manifests.read(partition)
        except CorruptionError as e:
            log.warning(
                "quiver.manifest.damaged path=%s error=%s: the partition is listed instead",
                self._manifests.display(partition),
                e,
            )
            return None
        if m is not None:
            self._copies[partition] = m
        return m

    def _without_deleted(self, partition: str, seqs: list[int]) -> list[int]:
        """No readable MANIFEST (the files decide): ``seqs`` less those the ack log
        records deleted. Retention removes a segment's entry, records the deletion,
        then deletes its objects; a failed delete leaves them, and a listing must not
        take them for published again (§11.1, §11.3)."""
        if self.deleted_marks is None or not seqs:
            return seqs
        try:
            gone = self.deleted_marks(partition)
        except (OSError, CorruptionError) as e:
            log.warning(
                "quiver.segment.deleted_marks_unread partition=%s error=%s: the listing "
                "decides alone",
                partition,
                e,
            )
            return seqs
        return [q for q in seqs if not gone.holds(q)]

    def _ack_log_marks(self, partition: str) -> DeletedMarks | None:
        """The ack log's record of ``partition``'s deleted seqs, None when there is none
        or it cannot be read (logged: the listing and GONE decide)."""
        if self.deleted_marks is None:
            return None
        try:
            return self.deleted_marks(partition)
        except (OSError, CorruptionError) as e:
            log.warning("quiver.segment.deleted_marks_unread partition=%s error=%s", partition, e)
            return None

    def _without_fenced_orphans(self, partition: str, seqs: list[int]) -> list[int]:
        """No readable MANIFEST: ``seqs`` less the orphans of fenced holders. A holder
        whose lease moved leaves its segment's objects when its MANIFEST change is
        refused, and its successor publishes the same committed transactions again from
        their staged objects (§10.2): a ``.meta`` holding a transaction that a ``.meta``
        of a later epoch holds too is such an orphan (§5.3 ``txns``, ``epoch``). Each
        ``.meta`` is read once (the cache keeps it)."""
        if len(seqs) < 2:
            return seqs
        metas = {
            q: m for q in seqs if isinstance(m := self._files.probe(partition, q), SegmentMeta)
        }
        newest: dict[int, int] = {}
        for m in metas.values():
            for t in m.txns:
                newest[t] = max(newest.get(t, 0), m.epoch)
        orphans = {q for q, m in metas.items() if any(newest[t] > m.epoch for t in m.txns)}
        if orphans:
            log.warning(
                "quiver.segment.fenced_orphans partition=%s seqs=%s: passed over (their "
                "transactions were published at a later epoch)",
                partition,
                sorted(orphans),
            )
        return [q for q in seqs if q not in orphans]

    def manifest_copy(self, partition: str) -> Manifest | None:
        return self._copies.get(partition)

    def void_seqs(self, partition: str) -> tuple[int, frozenset[int]]:
        """What the MANIFEST at hand records gone (deleted, moved aside or void)."""
        m = self._deciding(partition, fresh=False)
        if m is None:
            return 0, frozenset()
        return m.deleted_floor, m.deleted_above

    def orphans(self, partition: str) -> list[int]:
        """Seqs with objects the MANIFEST does not list, void or below its ``high``
        (never above it: a publication may be between its ``.meta`` and its manifest
        step): one listing and one read. Nothing without a readable MANIFEST."""
        m = self._deciding(partition)
        if m is None:
            return []
        listing = self._files.listing(partition)
        found = {*listing.published, *listing.unpublished}
        return sorted(s for s in found if not m.lists(s) and (s <= m.high or m.deleted(s)))

    def remove_orphans(self, partition: str) -> list[int]:
        """``.meta`` first, as a deletion does."""
        seqs = self.orphans(partition)
        if seqs:
            pairs = [self._files.paths(partition, q) for q in seqs]
            self._files.forget(partition, seqs)
            self._files.backend.remove([m for _, m in pairs])
            self._files.backend.remove([a for a, _ in pairs])
            log.info("quiver.segment.orphans_removed partition=%s seqs=%s", partition, seqs)
        return seqs

    def view(self, partition: str) -> PartitionView:
        """The MANIFEST alone: what it lists is what is published (§11.3)."""
        m = self._manifests.for_reader(partition, lambda: self.manifest_from_listing(partition))
        if m is None:
            return self.listed_view(partition)
        self._copies[partition] = m
        entries, damaged = manifest_entries(self._files, partition, m)
        return PartitionView(entries, damaged, m.high, True)

    def listed_view(self, partition: str) -> PartitionView:
        """This listing (the periodic safety net, ``quiver gc --full``) also removes the
        orphans of other lease holders."""
        self.remove_orphans(partition)
        return surveyed_view(self._survey(partition))

    # -- the MANIFEST kept ----------------------------------------------------------
    def manifest_from_listing(self, partition: str) -> Manifest:
        """What the ack log records deleted stays gone in it (§11.3)."""
        return manifest_from_survey(
            partition,
            self._survey(partition),
            self._files.quarantined(partition),
            self._ack_log_marks(partition),
        )

    def sync_manifest(self, partition: str, floor: int) -> Manifest | None:
        """The MANIFEST read again (written from a listing when missing or damaged);
        nothing is added: a ``.meta`` it does not list is not published, and only
        this writer's STATE may say one is its own (§9.3). The change claims the
        writer's epoch (a write only when it is new)."""
        self._manifests.forget(partition)
        m = self._manifests.update(
            partition, lambda m: m, build=lambda: self.manifest_from_listing(partition)
        )
        self._copies[partition] = m
        return m

    def mark_damaged(self, damaged: Iterable[DamagedSegment]) -> None:
        mark_damaged(self._manifests, damaged, self.manifest_from_listing)

    # -- unpublishing -----------------------------------------------------------------
    def prepare_removal(self, partition: str, seqs: Iterable[int]) -> list[int]:
        """The staged objects still left for the transactions ``seqs`` hold are removed
        (a writer's drop after sealing is best effort; once the segments are gone a
        MANIFEST rebuilt from a listing could not name those transactions, and a
        leftover would be sealed again, §10.2): one LIST of ``txns/`` when they name
        transactions, one DELETE per leftover. Removing a leftover is harmless even if
        the segment then stays (its transaction is sealed: the MANIFEST names it). Once
        the plan is final, :meth:`record_removal` keeps the removal in GONE.

        Returns the seqs to hold this pass (logged ``quiver.gc.held``): those naming a
        transaction whose leftover could not be removed (all that name one when the
        LIST failed). Nothing raises."""
        doomed = sorted(set(seqs))
        if not doomed:
            return []
        copy = self._copies.get(partition)
        named: dict[int, set[int]] = {q: set() for q in doomed}
        if copy is not None:
            for e in copy.entries:
                if e.seq in named:
                    named[e.seq].update(e.txns)
        for q in doomed:
            meta = self._files.cached(partition, q)
            if meta is not None:
                named[q].update(meta.txns)
        txns = {t for ts in named.values() for t in ts}
        held: set[int] = set()
        objects = self._manifests.objects
        if txns:
            try:
                left = [t for t in staged_ids(objects, partition) if t in txns]
            except OSError as e:
                held.update(q for q, ts in named.items() if ts)
                log.warning("quiver.gc.held partition=%s seqs=%s: txns/ unlisted (%s)",
                            partition, sorted(held), e)  # fmt: skip
                left = []
            for t in left:
                try:
                    drop_staged(objects, partition, [t])
                except OSError as e:
                    stuck = sorted(q for q, ts in named.items() if t in ts)
                    held.update(stuck)
                    log.warning(
                        "quiver.gc.held partition=%s seqs=%s: the leftover staged object of "
                        "transaction %d cannot be removed (%s); kept until it can",
                        partition, stuck, t, e,
                    )  # fmt: skip
            if left:
                log.info("quiver.staged.dropped_with_segment partition=%s txns=%s", partition, left)
        going = [q for q in doomed if q not in held]
        self._named.setdefault(partition, {}).update({q: named[q] for q in going})
        # the delete that follows need not prepare them again
        self._prepared.setdefault(partition, set()).update(going)
        return sorted(held)

    def record_removal(self, partition: str, seqs: Iterable[int]) -> None:
        """Join the removal of ``seqs`` (seqs gone, the high, the transactions they
        held, retired) into the partition's GONE (§15.4), so that a MANIFEST rebuilt
        later never brings them back, whatever happens to the pass after. OSError when
        GONE cannot be written: the caller keeps these segments this pass."""
        doomed = sorted(set(seqs))
        if not doomed:
            return
        copy = self._copies.get(partition)
        named = self._named.get(partition, {})
        base = copy if copy is not None else Manifest(partition)
        retired = tuple(sorted(t for q in doomed for t in named.get(q, ())))
        self._manifests.facts.keep(
            base.removed(doomed).with_facts(Manifest(partition, txns_gone=retired))
        )

    def before_delete(self, partition: str, seqs: list[int]) -> None:
        """:meth:`prepare_removal` for the seqs a retention pass did not just prepare;
        OSError when some must be kept (the next pass deletes them)."""
        prepared = self._prepared.pop(partition, set())
        self._named.pop(partition, None)
        held = self.prepare_removal(partition, [q for q in seqs if q not in prepared])
        if held:
            raise RemovalHeldError(partition, held)

    def unlist(self, partition: str, seqs: list[int], *, reclaimed: bool = False) -> None:
        unlist(
            self._manifests, partition, seqs, lambda: self.manifest_from_listing(partition),
            reclaimed=reclaimed,
        )  # fmt: skip

    def _survey(self, partition: str) -> SegmentSurvey:
        return self._files.survey(partition, self.published_seqs(partition), strict=False)
