"""The segment catalog: which segments of a store exist, published, damaged or moved
aside, and the order in which their files appear (ARCHITECTURE.md §5.4, §5.5).

Segments of partition ``<pid>`` are ``<location>/<pid>/<seq:020d>.arrow`` plus
``<seq:020d>.meta``. A segment is published iff its ``.meta`` exists; the ``.arrow``
is made durable first. The bytes move through a
:class:`~quiver_spark.segment.backend.SegmentBackend` (a local directory or any fsspec
URL); every name and order decision is made here.

Callers hold the partition's writer lock for :meth:`SegmentLocation.write`,
:meth:`~SegmentLocation.delete`, :meth:`~SegmentLocation.cleanup` and
:meth:`~SegmentLocation.quarantine`; reads may run concurrently from anywhere.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa

from ..config import NAME_RE, SegmentConfig, validate_name
from ..control.manifest import Manifest, ManifestEntry, ManifestStore, manifest_key
from ..errors import (
    CorruptionError,
    LeaseLostError,
    SegmentExistsError,
    SegmentMissingError,
    SeqTakenError,
)
from ..format import (
    META_SUFFIX,
    QUARANTINE_DIR,
    SEGMENT_SUFFIX,
    TMP_SUFFIX,
    checksum,
    parse_segment_file_seq,
    parse_seq,
)
from ..fs import DEFAULT_IO, FileIO
from ..objects import ObjectStore
from ..seams import DeletedMarks
from ..staging import drop_staged, staged_ids
from ..urls import check_url, is_local_url
from .backend import Consume, SegmentBackend
from .backends import open_backend
from .files import DamagedSegment, Found, SegmentFiles, SegmentListing, SegmentSurvey
from .meta import SegmentMeta, schema_fingerprint
from .quarantine import move_aside, quarantine_mark, quarantine_note
from .reader import SegmentReader, open_verified
from .writer import Serialized, coalesce, event_time_range, prepare, serialize

log = logging.getLogger(__name__)


_SEQS_TAKEN_IN_A_ROW = 24
"""Seqs in a row a sealer finds taken (another holder's objects) before it gives up
(an ``OSError``: the next pass tries again)."""


@dataclass(frozen=True)
class CleanupReport:
    """What :meth:`SegmentLocation.cleanup` removed and the highest seq it saw on disk."""

    removed: list[str]
    max_seq_seen: int
    max_published_seq: int = 0
    """Highest seq that was ever published and still leaves a trace on disk: a
    ``.meta`` in the partition directory or any file in ``quarantine/``. Unpublished
    ``.arrow`` orphans do not count: no reader ever saw their seq."""


@dataclass(frozen=True)
class PartitionView:
    """One partition's published segments as a new reader sees them: from its
    MANIFEST (one read) plus the seqs published after ``high`` and not in it yet (a
    probe), or from a listing when there is no usable manifest (§6.7)."""

    entries: list[ManifestEntry]
    """Readable segments in seq order (damaged ones are in ``damaged`` only)."""
    damaged: list[DamagedSegment]
    high: int
    """The highest seq this view knows was published (0: none)."""
    from_manifest: bool


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


class SegmentLocation:
    """All finalized segments of a store, local or behind fsspec.

    Parameters
    ----------
    url
        A local path, ``file://`` URL, or any fsspec URL (``s3://bucket/prefix``,
        ``memory://x``).
    io
        File layer for local locations (tests pass a recording or failing subclass).
    storage_options
        Passed to fsspec for remote locations (credentials, ``endpoint_url``...).
    """

    def __init__(
        self,
        url: str,
        *,
        io: FileIO = DEFAULT_IO,
        storage_options: Mapping[str, object] | None = None,
        manifests: ManifestStore | None = None,
        objects: ObjectStore | None = None,
        prefix: str = "",
    ) -> None:
        self.url = url
        self.manifests = manifests
        """The store's per-partition MANIFESTs (§6.7); None: every reader lists."""
        self.deleted_marks: Callable[[str], DeletedMarks] | None = None
        """The ack log's record of a partition's deleted segments (set by the store
        when it has one): a listing that decides a partition (no readable MANIFEST)
        never publishes again a seq retention recorded deleted, whose objects a failed
        delete may have left (§6.7, §12.4)."""
        self.manifest_publishes = objects is not None and manifests is not None
        """On an object root the MANIFEST is the publication point (§12.4): a segment
        is published iff its partition's MANIFEST lists it; a ``.meta`` it does not
        list is an orphan of another lease holder, never read."""
        # partition -> the MANIFEST as this instance last read or wrote it: what the
        # probes of an object root accept without reading it again
        self._copies: dict[str, Manifest] = {}
        # seqs a retention pass just prepared for removal (prepare_removal), and the
        # transactions each of them names
        self._prepared: dict[str, set[int]] = {}
        self._named: dict[str, dict[int, set[int]]] = {}
        if objects is None:
            check_url("segment.path", url)  # a missing backend or bad URL: one clear error
        self.is_local = objects is None and is_local_url(url)
        """Whether the segments are in a local directory (fsynced) or behind fsspec
        or an object root's store (``objects``, keys under ``prefix``)."""
        self._b = (
            open_backend(prefix, io=io, objects=objects)
            if objects is not None
            else open_backend(url, io=io, storage_options=storage_options)
        )
        self._files = SegmentFiles(self._b)
        self.quarantined_total = 0
        """Segments quarantined through this instance (a metric for the store)."""

    def __repr__(self) -> str:
        return f"SegmentLocation({self.url!r})"

    @property
    def backend(self) -> SegmentBackend:
        """The storage this catalog moves bytes through."""
        return self._b

    def _paths(self, partition: str, seq: int) -> tuple[str, str]:
        return self._files.paths(partition, seq)

    # -- writing ------------------------------------------------------------------
    def write(
        self,
        partition: str,
        seq: int,
        batches: list[pa.RecordBatch],
        *,
        min_ingestion_ns: int,
        max_ingestion_ns: int,
        wal_ranges: Iterable[tuple[int, int]],
        event_time_column: str | None = None,
        target_batch_rows: int = SegmentConfig.target_batch_rows,
        compression: str | None = None,
    ) -> SegmentMeta:
        """Write, make durable and publish segment ``seq``: :meth:`write_data` + :meth:`publish`.

        Takes the keyword arguments of :meth:`write_data`. Consecutive small batches are
        coalesced toward ``target_batch_rows``; dictionaries are unified. The ``.arrow``
        is durable before the ``.meta`` appears. If ``seq`` is already published, a retry
        with identical bytes and WAL ranges returns the published metadata (idempotent);
        anything else raises :class:`SegmentExistsError` (sequence reuse).
        """
        meta = self.write_data(
            partition,
            seq,
            batches,
            min_ingestion_ns=min_ingestion_ns,
            max_ingestion_ns=max_ingestion_ns,
            wal_ranges=wal_ranges,
            event_time_column=event_time_column,
            target_batch_rows=target_batch_rows,
            compression=compression,
        )
        self.publish(meta)
        return meta

    def write_data(
        self,
        partition: str,
        seq: int,
        batches: list[pa.RecordBatch],
        *,
        min_ingestion_ns: int,
        max_ingestion_ns: int,
        wal_ranges: Iterable[tuple[int, int]],
        event_time_column: str | None = None,
        target_batch_rows: int = SegmentConfig.target_batch_rows,
        compression: str | None = None,
    ) -> SegmentMeta:
        """Phase one of :meth:`write`: the durable ``.arrow`` and its metadata, unpublished.

        The caller may record the returned metadata (for example in its own commit
        point) before calling :meth:`publish`. If ``seq`` is already published this
        returns the published metadata when the bytes and WAL ranges are identical,
        and raises :class:`SegmentExistsError` otherwise; it never rewrites the file.
        """
        if seq < 1:
            raise ValueError(f"segment seq must be >= 1, got {seq}")
        arrow_path, meta_path = self._paths(partition, seq)
        ranges = tuple((int(lo), int(hi)) for lo, hi in wal_ranges)
        table = prepare(batches)
        lo_et, hi_et = event_time_range(table, event_time_column)

        def fill(consume: Consume) -> Serialized:
            return serialize(
                consume, table.schema, coalesce(table, target_batch_rows), compression=compression
            )

        if self._b.exists(meta_path):
            stats = fill(lambda _view: None)  # checksum only: is this a retry?
            return self._same_or_raise(partition, seq, stats.checksum, stats.size_bytes, ranges)
        self._b.makedirs(self._b.join(partition))
        if self.manifest_publishes:
            stats = self._create_arrow(partition, seq, fill)
        else:
            stats = self._b.put(arrow_path, fill, atomic=False)
        return SegmentMeta(
            partition=partition,
            seq=seq,
            rows=stats.rows,
            size_bytes=stats.size_bytes,
            batches=stats.batches,
            min_ingestion_ns=min_ingestion_ns,
            max_ingestion_ns=max_ingestion_ns,
            event_time_column=event_time_column,
            min_event_time=lo_et,
            max_event_time=hi_et,
            schema_fingerprint=schema_fingerprint(table.schema),
            checksum=stats.checksum,
            wal_ranges=ranges,
            created_ns=time.time_ns(),
        )

    def _create_arrow(
        self, partition: str, seq: int, fill: Callable[[Consume], Serialized]
    ) -> Serialized:
        """Object root: create ``<seq>.arrow``. Other bytes there (another holder's
        upload, published or not) make the seq taken (:class:`SeqTakenError`): the
        caller records it void and moves on. Never removed here: the holder that made
        them may be the partition's newest, and a delete has no condition the storage
        could check, so a paused holder's late delete would land on its successor's
        object (§12.4, fencing)."""
        arrow_path, _ = self._paths(partition, seq)
        try:
            return self._b.put(arrow_path, fill, atomic=False)
        except FileExistsError:
            log.info(
                "quiver.segment.foreign_arrow partition=%s seq=%d path=%s: seq taken",
                partition,
                seq,
                self._b.display(arrow_path),
            )
            raise SeqTakenError(self._b.display(arrow_path), partition, seq) from None

    def move_data(self, meta: SegmentMeta, seq: int) -> SegmentMeta:
        """Object root: the bytes of this writer's segment ``meta`` (whose ``.meta``
        key another holder took) uploaded again as segment ``seq`` (same content,
        same checksum); :class:`SeqTakenError` when ``seq`` is taken too."""
        arrow_path, _ = self._paths(meta.partition, meta.seq)
        data = self._b.read(arrow_path)
        if len(data) != meta.size_bytes:
            raise SegmentMissingError(
                meta.partition,
                meta.seq,
                f"not movable ({self._b.display(arrow_path)} holds {len(data)} bytes, "
                f"expected {meta.size_bytes})",
                kind="corrupt",
            )
        new = replace(meta, seq=seq, created_ns=time.time_ns())
        _, meta_path = self._paths(meta.partition, seq)
        if self._b.exists(meta_path):
            raise SeqTakenError(self._b.display(meta_path), meta.partition, seq)
        self._create_arrow(
            meta.partition,
            seq,
            lambda consume: _copied(consume, data, meta),
        )
        log.info(
            "quiver.segment.moved partition=%s from_seq=%d to_seq=%d", meta.partition, meta.seq, seq
        )
        return new

    def void(self, partition: str, seq: int) -> None:
        """Object root: record ``seq`` void in the MANIFEST (gone: never published,
        never waited for, never a loss). Raises ``FencedError`` (a
        ``LeaseLostError``) when a later lease holder wrote the MANIFEST."""
        assert self.manifests is not None
        log.warning("quiver.segment.void partition=%s seq=%d", partition, seq)
        self._copies[partition] = self.manifests.update(
            partition,
            lambda m: m if m.lists(seq) else m.removed([seq]),
            build=lambda: self.manifest_from_listing(partition),
        )

    def publish(
        self,
        meta: SegmentMeta,
        *,
        again: bool = False,
        txns: Iterable[int] = (),
        sealed_by: int | None = None,
        txn_floor: int = 0,
    ) -> None:
        """Phase two of :meth:`write`: durably create the ``.meta``, making it visible.

        Refuses (SegmentMissingError) when the ``.arrow`` is absent or has another
        size. Idempotent for the same segment; a different one already published
        under this seq raises :class:`SegmentExistsError`. ``again`` writes the same
        ``.meta`` anew even when it exists (a new file, renamed over it, then the
        directory fsynced): for a publication that failed after its rename, whose
        name may not be durable. ``txns`` (object root): the transactions whose rows
        the segment holds, recorded in its MANIFEST entry (§12.6); ``sealed_by``: the
        epoch of a sealer publishing a staged transaction; ``txn_floor``: the
        writer's transaction floor, recorded with the entry (§12.6).
        """
        txns = tuple(txns)
        arrow_path, meta_path = self._paths(meta.partition, meta.seq)
        if self._b.exists(meta_path):
            self._same_or_raise(
                meta.partition,
                meta.seq,
                meta.checksum,
                meta.size_bytes,
                meta.wal_ranges,
                taken=self.manifest_publishes,
            )
            if not again:
                self._manifest_publish(meta.partition, [meta], txns, sealed_by, txn_floor)
                return
        size = self._b.size(arrow_path)
        if size != meta.size_bytes:
            state = "missing" if size is None else f"{size} bytes, expected {meta.size_bytes}"
            raise SegmentMissingError(
                meta.partition,
                meta.seq,
                f"not publishable ({self._b.display(arrow_path)} {state})",
                kind="missing" if size is None else "corrupt",
            )
        encoded = self._as_published(meta, txns, sealed_by).encode()
        if self.manifest_publishes:
            assert self.manifests is not None
            standing = self.manifests.check_fence(meta.partition)
            if standing is not None and standing.deleted(meta.seq) and not standing.lists(meta.seq):
                # recorded gone (void) meanwhile: its .meta would only be an orphan
                # beside the segment's moved copy (§12.4)
                raise SeqTakenError(self._b.display(meta_path), meta.partition, meta.seq)
        made = False
        try:
            self._b.put(meta_path, lambda consume: consume(memoryview(encoded)))
            made = True
        except FileExistsError:
            if not self.manifest_publishes:
                raise
            self._same_or_raise(
                meta.partition,
                meta.seq,
                meta.checksum,
                meta.size_bytes,
                meta.wal_ranges,
                taken=True,
            )
        log.info(
            "quiver.segment.publish partition=%s seq=%d rows=%d bytes=%d batches=%d",
            meta.partition,
            meta.seq,
            meta.rows,
            meta.size_bytes,
            meta.batches,
        )
        try:
            self._manifest_publish(meta.partition, [meta], txns, sealed_by, txn_floor)
        except (LeaseLostError, SeqTakenError):
            if made:
                self._unmake_meta(meta.partition, meta.seq, encoded)
            raise

    def _unmake_meta(self, partition: str, seq: int, encoded: bytes) -> None:
        """Object root, a publication refused (fenced, or its seq recorded void): the
        ``.meta`` this call made is removed unless the MANIFEST lists the seq after all
        (a publication that landed before a successor's change built on it). Its seq
        is never used again by anyone, so the delete, however late, meets no one
        else's object; what it saves is a listing's mistake while the MANIFEST is
        unreadable (§12.4). Best effort: a failure leaves an orphan for gc."""
        assert self.manifests is not None
        _, meta_path = self._paths(partition, seq)
        try:
            m = self.manifests.read(partition)
            if m is not None and m.lists(seq):
                return
            got = self._b.read(meta_path)
            if got == encoded:
                self._b.remove([meta_path])
                log.info("quiver.segment.unmade partition=%s seq=%d", partition, seq)
        except (OSError, CorruptionError, SegmentMissingError) as e:
            log.info("quiver.segment.unmake_failed partition=%s seq=%d: %s", partition, seq, e)

    def _as_published(
        self, meta: SegmentMeta, txns: tuple[int, ...], sealed_by: int | None
    ) -> SegmentMeta:
        """Object root: the ``.meta`` names the transactions it holds and the epoch of
        its publisher, as its MANIFEST entry will (§5.3), so that a listing deciding
        the partition (no readable MANIFEST) can pass over a fenced holder's orphan."""
        if not self.manifest_publishes or self.manifests is None:
            return meta
        epoch = sealed_by if sealed_by is not None else self.manifests.epoch_of(meta.partition)
        return replace(meta, txns=tuple(txns), epoch=epoch)

    def publish_staged(
        self,
        partition: str,
        txn_id: int,
        batches: builtins.list[pa.RecordBatch],
        *,
        ingestion_ns: int,
        epoch: int,
        target_batch_rows: int = SegmentConfig.target_batch_rows,
        event_time_column: str | None = None,
        first_seq: int = 0,
    ) -> SegmentMeta | None:
        """Object root: publish the rows of committed staged transaction ``txn_id`` as
        the partition's next segment, by a sealer holding the partition's lease at
        ``epoch`` (ARCHITECTURE.md §12.6). The MANIFEST step is the publication: it
        records the transaction in the entry (``sealed_by`` = ``epoch``) and is a
        no-op when the transaction is sealed already (None is returned then). A seq
        whose ``.meta`` another holder made is recorded void and the next one used; a
        later epoch in the MANIFEST raises ``FencedError``."""
        assert self.manifests is not None and self.manifest_publishes
        self.manifests.forget(partition)
        current = self.manifests.update(
            partition, lambda m: m, build=lambda: self.manifest_from_listing(partition)
        )
        if current.seals(txn_id):
            return None
        seq = max(current.high + 1, first_seq)  # first_seq: the partition's writer's next
        for _ in range(_SEQS_TAKEN_IN_A_ROW):
            try:
                meta = self.write_data(
                    partition,
                    seq,
                    batches,
                    min_ingestion_ns=ingestion_ns,
                    max_ingestion_ns=ingestion_ns,
                    wal_ranges=(),
                    event_time_column=event_time_column,
                    target_batch_rows=target_batch_rows,
                )
                self.publish(meta, txns=(txn_id,), sealed_by=epoch)
            except SeqTakenError:
                self.void(partition, seq)
                seq += 1
                continue
            published = self._copies.get(partition)
            if published is None or not published.lists(meta.seq):
                return None  # sealed meanwhile under another entry: this seq stays an orphan
            return meta
        raise OSError(f"partition {partition}: seqs taken in a row up to {seq}")

    # -- the manifest (§6.7) ----------------------------------------------------------
    def _manifest_publish(
        self,
        partition: str,
        metas: builtins.list[SegmentMeta],
        txns: tuple[int, ...] = (),
        sealed_by: int | None = None,
        txn_floor: int = 0,
    ) -> None:
        """After the ``.meta`` is durable (the publication point on a POSIX root): add
        the entries to the partition's MANIFEST. A failure raises (the caller's state
        is discarded and its recovery adds them: ``sync_manifest``). ``txns`` are
        recorded only on an object root (§12.6)."""
        if self.manifests is None:
            return
        if not self.manifest_publishes:
            txns, sealed_by, txn_floor = (), None, 0
        if not txns:
            sealed_by = None
        entries = [
            ManifestEntry.from_meta(self._as_published(m, txns, sealed_by), txns, sealed_by)
            for m in metas
        ]
        gaps = self.manifest_publishes  # seqs the writer passed over are void

        def change(m: Manifest) -> Manifest:
            if sealed_by is not None and any(m.seals(t) for t in txns):
                return m  # a staged transaction sealed already: never twice
            return m.published(entries, void_gaps=gaps).with_txn_floor(txn_floor)

        out = self.manifests.update(
            partition, change, build=lambda: self.manifest_from_listing(partition)
        )
        if self.manifest_publishes:
            self._copies[partition] = out
            if sealed_by is None:
                # a writer's own segment: published only if the MANIFEST lists it now; a
                # seq another holder recorded void (its .meta taken for theirs while this
                # writer was away) makes the writer move the segment (§12.4)
                for m in metas:
                    if not out.lists(m.seq):
                        _, meta_path = self._paths(partition, m.seq)
                        raise SeqTakenError(self._b.display(meta_path), partition, m.seq)

    def manifest_copy(self, partition: str) -> Manifest | None:
        """Object root: the MANIFEST of ``partition`` as this handle last read or wrote
        it (no request); None when it has none at hand."""
        return self._copies.get(partition)

    def seals_txn(self, partition: str, txn_id: int) -> bool:
        """Object root: whether the MANIFEST this handle last read or wrote for
        ``partition`` says staged transaction ``txn_id`` needs no seal (§12.6)."""
        copy = self._copies.get(partition)
        return copy is not None and copy.seals(txn_id)

    def _without_deleted(self, partition: str, seqs: builtins.list[int]) -> builtins.list[int]:
        """Object root, no readable MANIFEST (the files decide): ``seqs`` less those the
        ack log records deleted. Retention removes a segment's entry, records the
        deletion, then deletes its objects; a failed delete leaves them, and a listing
        must not take them for published again (§6.7, §12.4)."""
        if self.deleted_marks is None or not self.manifest_publishes or not seqs:
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
        """Object root: the ack log's record of ``partition``'s deleted seqs, None when
        there is none or it cannot be read (logged: the listing and GONE decide)."""
        if self.deleted_marks is None or not self.manifest_publishes:
            return None
        try:
            return self.deleted_marks(partition)
        except (OSError, CorruptionError) as e:
            log.warning("quiver.segment.deleted_marks_unread partition=%s error=%s", partition, e)
            return None

    def _without_fenced_orphans(
        self, partition: str, seqs: builtins.list[int]
    ) -> builtins.list[int]:
        """Object root, no readable MANIFEST: ``seqs`` less the orphans of fenced
        holders. A holder whose lease moved leaves its segment's objects when its
        MANIFEST change is refused, and its successor publishes the same committed
        transactions again from their staged objects (§12.6): a ``.meta`` holding a
        transaction that a ``.meta`` of a later epoch holds too is such an orphan
        (§5.3 ``txns``, ``epoch``). Each ``.meta`` is read once (the cache keeps it)."""
        if not self.manifest_publishes or len(seqs) < 2:
            return seqs
        metas = {q: m for q in seqs if isinstance(m := self.probe(partition, q), SegmentMeta)}
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

    def manifest_from_listing(self, partition: str) -> Manifest:
        """The manifest a listing gives (every ``.meta`` read once): the one-time
        upgrade of a partition that has none, or the rebuild of a damaged one. Every
        seq up to the highest one listed or quarantined that is not published is
        recorded gone."""
        survey = self.survey(partition)
        quarantined = self._files.quarantined(partition)
        # a .meta names its transactions on an object root (§5.3): the rebuilt entries
        # name them too, so a sealed transaction is never sealed again (§12.6)
        entries = [ManifestEntry.from_meta(m, m.txns) for m in survey.metas]
        entries += [
            ManifestEntry(partition, d.seq, d.size_bytes, 0, 0, 0, 0, 0) for d in survey.damaged
        ]
        entries.sort(key=lambda e: e.seq)
        live = {e.seq for e in entries}
        high = max([*live, *quarantined], default=0)
        m = Manifest(partition, high=high, entries=tuple(entries))
        m = m.removed(s for s in range(1, high + 1) if s not in live)
        marks = self._ack_log_marks(partition)
        if marks is not None:  # what the ack log records deleted stays gone (§12.4)
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

    def sync_manifest(self, partition: str, floor: int = 0) -> Manifest | None:
        """Bring ``partition``'s MANIFEST up to what is published (its writer, at
        open): written from a listing when missing or damaged, and every segment
        published after its ``high`` and not in it yet (a publication that died
        before its manifest step) added; seqs below ``floor`` are never probed."""
        if self.manifests is None:
            return None
        self.manifests.forget(partition)
        if self.manifest_publishes:
            # the MANIFEST is the publication point: a .meta it does not list is not
            # published, and only this writer's STATE may say one is its own (§7.3);
            # the change claims the writer's epoch (a write only when it is new)
            m = self.manifests.update(
                partition, lambda m: m, build=lambda: self.manifest_from_listing(partition)
            )
            self._copies[partition] = m
            return m

        def add_published(m: Manifest) -> Manifest:
            found = self.probe_next({partition: max(m.high, floor) + 1})[partition]
            metas = [f for f in found if isinstance(f, SegmentMeta)]
            bad = [(f.seq, f.error) for f in found if isinstance(f, DamagedSegment)]
            if bad:  # still published: an entry that is never chosen, counted
                m = m.published(
                    ManifestEntry(partition, f.seq, f.size_bytes, 0, 0, 0, 0, 0)
                    for f in found
                    if isinstance(f, DamagedSegment)
                ).marked_damaged(bad)
            return m.published(ManifestEntry.from_meta(x) for x in metas)

        return self.manifests.update(
            partition, add_published, build=lambda: self.manifest_from_listing(partition)
        )

    def view(self, partition: str) -> PartitionView:
        """What a new reader sees of ``partition``: its MANIFEST (one read; written from
        a listing by ``create`` when it has none, the one-time upgrade) and the
        segments published after its ``high`` (a probe: one read for the miss), or
        the listing when there is no manifest store or the manifest is damaged
        (counted and logged; the next writer or retention pass rewrites it)."""
        validate_name("partition", partition)
        m: Manifest | None = None
        if self.manifests is not None:
            try:
                m = self.manifests.read(partition)
            except CorruptionError as e:
                log.warning(
                    "quiver.manifest.damaged path=%s error=%s: the partition is listed instead "
                    "(the next writer or retention pass rewrites it; `quiver fsck` names it)",
                    self.manifests.display(partition),
                    e,
                )
                return self.listed_view(partition)
            if m is None:
                m = self.manifest_from_listing(partition)
                try:
                    self.manifests.create(m)
                except OSError as e:  # a read-only root: the listing still answers
                    log.warning(
                        "quiver.manifest.unwritten path=%s error=%s",
                        self.manifests.display(partition),
                        e,
                    )
        if m is None:
            return self.listed_view(partition)
        if self.manifest_publishes:
            self._copies[partition] = m
        errors = m.damaged_errors()
        entries = [e for e in m.entries if e.seq not in errors]
        damaged = [
            DamagedSegment(
                partition, e.seq, self._b.display(self._paths(partition, e.seq)[1]),
                errors[e.seq], e.size_bytes,
            )
            for e in m.entries
            if e.seq in errors
        ]  # fmt: skip
        high = m.high
        if self.manifest_publishes:  # what it lists is what is published (§12.4)
            return PartitionView(entries, damaged, high, True)
        for f in self.probe_next({partition: m.high + 1})[partition]:
            if isinstance(f, SegmentMeta):
                entries.append(ManifestEntry.from_meta(f))
            else:
                damaged.append(f)
            high = max(high, f.seq)
        return PartitionView(entries, damaged, high, True)

    def listed_view(self, partition: str) -> PartitionView:
        """:meth:`view` from a listing, every ``.meta`` read (cached once read). On an
        object root this listing (the periodic safety net, ``quiver gc --full``) also
        removes the orphans of other lease holders (:meth:`remove_orphans`)."""
        if self.manifest_publishes:
            self.remove_orphans(partition)
        survey = self.survey(partition)
        entries = [ManifestEntry.from_meta(m) for m in survey.metas]
        high = max([e.seq for e in entries] + [d.seq for d in survey.damaged], default=0)
        return PartitionView(entries, list(survey.damaged), high, False)

    def mark_damaged(self, damaged: Iterable[DamagedSegment]) -> None:
        """Record in the MANIFEST segments whose ``.meta`` was found failing
        verification, so new readers name them without reading every ``.meta``."""
        if self.manifests is None:
            return
        by_part: dict[str, builtins.list[tuple[int, str]]] = {}
        for d in damaged:
            by_part.setdefault(d.partition, []).append((d.seq, d.error))
        for p, found in by_part.items():
            self._manifest_mark(p, found)

    def _manifest_mark(self, partition: str, found: builtins.list[tuple[int, str]]) -> None:
        assert self.manifests is not None
        self.manifests.update(
            partition,
            lambda m: m.marked_damaged(found),
            build=lambda: self.manifest_from_listing(partition),
        )

    def is_published(self, partition: str, seq: int) -> bool:
        """Whether segment ``seq`` of ``partition`` has its ``.meta`` (is visible)."""
        return self._b.has_file(self._paths(partition, seq)[1])

    def _same_or_raise(
        self,
        partition: str,
        seq: int,
        crc: int,
        size: int,
        ranges: tuple[tuple[int, int], ...],
        *,
        taken: bool | None = None,
    ) -> SegmentMeta:
        """The published metadata when it is this very segment (a retry); else
        SegmentExistsError, or on an object root (``taken``) SeqTakenError: another
        holder's ``.meta``, damaged or not."""
        taken = self.manifest_publishes if taken is None else taken
        shown = self._b.display(self._paths(partition, seq)[1])
        try:
            old = self.read_meta(partition, seq)
        except CorruptionError:
            if taken:
                raise SeqTakenError(shown, partition, seq) from None
            raise
        if (old.checksum, old.size_bytes, old.wal_ranges) == (crc, size, ranges):
            log.info("quiver.segment.publish_repeat partition=%s seq=%d", partition, seq)
            return old
        if taken:
            raise SeqTakenError(shown, partition, seq)
        raise SegmentExistsError(shown)

    # -- reading ------------------------------------------------------------------
    def partitions(self) -> list[str]:
        """Partition ids that have a segment directory (valid names only), sorted."""
        return sorted(n for n in self._b.subdirs(self._b.root) if NAME_RE.fullmatch(n))

    def published_seqs(self, partition: str) -> list[int]:
        """Seqs of the published segments of ``partition``, sorted, from one listing
        (no ``.meta`` is read or verified); on an object root only those its MANIFEST
        lists (one more read; §12.4)."""
        listed = self.listing(partition).published
        m = self._publication(partition)
        if m is None:
            return self._without_fenced_orphans(partition, self._without_deleted(partition, listed))
        return [s for s in listed if m.lists(s)]

    def _publication(self, partition: str, *, fresh: bool = True) -> Manifest | None:
        """Object root: the MANIFEST that decides what is published (read again unless
        ``fresh`` is False and a copy is at hand); None on a POSIX root, or when the
        partition has no readable MANIFEST (a store not upgraded yet, a damaged one:
        the files decide, §6.7)."""
        if not self.manifest_publishes:
            return None
        assert self.manifests is not None
        if not fresh and partition in self._copies:
            return self._copies[partition]
        try:
            m = self.manifests.read(partition)
        except CorruptionError as e:
            log.warning(
                "quiver.manifest.damaged path=%s error=%s: the partition is listed instead",
                self.manifests.display(partition),
                e,
            )
            return None
        if m is not None:
            self._copies[partition] = m
        return m

    def void_seqs(self, partition: str) -> tuple[int, frozenset[int]]:
        """``(floor, above)``: on an object root the seqs its MANIFEST records gone
        (deleted, moved aside or void: never published), from the copy at hand; every
        seq <= ``floor`` and those in ``above``. Nothing on a POSIX root."""
        m = self._publication(partition, fresh=False)
        if m is None:
            return 0, frozenset()
        return m.deleted_floor, m.deleted_above

    def orphans(self, partition: str) -> builtins.list[int]:
        """Object root: seqs with objects (``.arrow`` or ``.meta``) the MANIFEST does not
        list, that are void or below its ``high`` (never seqs above it: a publication
        may be between its ``.meta`` and its manifest step), from one listing and one
        read. Nothing on a POSIX root or without a readable MANIFEST."""
        m = self._publication(partition)
        if m is None:
            return []
        listing = self.listing(partition)
        found = {*listing.published, *listing.unpublished}
        return sorted(s for s in found if not m.lists(s) and (s <= m.high or m.deleted(s)))

    def remove_orphans(self, partition: str) -> builtins.list[int]:
        """Object root: delete the objects of :meth:`orphans` (``.meta`` first, as a
        deletion does). Returns the seqs removed."""
        seqs = self.orphans(partition)
        if seqs:
            pairs = [self._paths(partition, q) for q in seqs]
            self.forget(partition, seqs)
            self._b.remove([m for _, m in pairs])
            self._b.remove([a for a, _ in pairs])
            log.info("quiver.segment.orphans_removed partition=%s seqs=%s", partition, seqs)
        return seqs

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
        """The bytes of the location's quarantine mark (§5.5), None if nothing was ever
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
        self, starts: Mapping[str, int], skip: Callable[[str, int], bool] | None = None
    ) -> dict[str, builtins.list[Found]]:
        """For each partition, the segments published from seq ``starts[p]`` on, up to
        the first one that is not (seqs are gapless, §5): what was published since a
        reader last looked. ``skip(p, seq)`` true passes over a seq known to be gone
        (asked first: cached metadata of a segment deleted since is not served).

        One read per new segment plus one per partition for the miss; on an object
        store each round's reads (one per partition) are sent together. On an object
        root a segment counts only if the partition's MANIFEST lists it: a ``.meta``
        the copy at hand does not list makes the probe read the MANIFEST again (one
        read), and what it lists from ``starts[p]`` on is the answer (§12.4).
        """
        if not self.manifest_publishes:
            return self._files.probe_next(starts, skip)
        return {
            validate_name("partition", p): self._listed(p, start, skip)
            for p, start in starts.items()
        }

    def _listed(
        self, partition: str, start: int, skip: Callable[[str, int], bool] | None
    ) -> builtins.list[Found]:
        """Object root: the segments ``partition``'s MANIFEST lists from ``start`` on.
        The copy at hand answers while the MANIFEST's version is still its own (one
        HEAD: the whole cost of an idle poll); else the MANIFEST is read again (one
        GET). No ``.meta`` is probed: a seq a successor passed over (void, perhaps with
        no ``.meta`` at all) never holds a reader back (§12.4)."""
        assert self.manifests is not None
        copy = self._copies.get(partition)
        m: Manifest | None = copy
        if (
            copy is None
            or copy.version is None
            or (self.manifests.objects.head(manifest_key(partition)) != copy.version)
        ):
            m = self._publication(partition)
        if m is None:  # no readable MANIFEST: the files decide (§6.7)
            found = self._files.probe_next({partition: start}, skip)[partition]
            seqs = self._without_deleted(partition, [f.seq for f in found])
            kept = set(self._without_fenced_orphans(partition, seqs))
            return [f for f in found if f.seq in kept]
        out: builtins.list[Found] = []
        for e in m.entries:
            if e.seq < start or (skip is not None and skip(partition, e.seq)):
                continue
            got = self.probe(partition, e.seq)
            if got is not None:
                out.append(got)
        return out

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
        (a ``.meta`` no MANIFEST lists is an orphan, §12.4)."""
        if self.manifest_publishes:
            copy = self._copies.get(partition)
            if copy is None or not copy.lists(seq):
                m = self._publication(partition)
                if m is not None and not m.lists(seq):
                    assert self.manifests is not None
                    raise SegmentMissingError(
                        partition,
                        seq,
                        f"not published ({self.manifests.display(partition)} does not list it)",
                    )
        return self.cached(partition, seq) or self.read_meta(partition, seq)

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
        sizes = {s: 0 for n in entries if (s := parse_seq(n, META_SUFFIX))}
        for n, size in entries.items():
            seq = parse_seq(n, SEGMENT_SUFFIX) or parse_seq(n, META_SUFFIX)
            if seq in sizes:
                sizes[seq] += size
        return sizes

    # -- removing -----------------------------------------------------------------
    def delete(self, partition: str, seqs: Iterable[int]) -> None:
        """Unpublish (every ``.meta``, durably) then remove the ``.arrow`` files.

        Idempotent: missing files are ignored.
        """
        seqs = list(seqs)
        prepared = self._prepared.pop(partition, set())
        self._named.pop(partition, None)
        held = self.prepare_removal(partition, [q for q in seqs if q not in prepared])
        if held:
            raise OSError(
                f"partition {partition}: segments {held} kept: what must go before them "
                "could not (logged quiver.gc.held); the next pass deletes them"
            )
        self.forget(partition, seqs)
        self._manifest_remove(partition, seqs)
        pairs = [self._paths(partition, s) for s in seqs]
        self._b.remove([m for _, m in pairs])
        self._b.remove([a for a, _ in pairs])
        log.info("quiver.segment.delete partition=%s seqs=%d", partition, len(pairs))

    def check_before_delete(
        self, deletions: Mapping[str, Iterable[int]]
    ) -> tuple[dict[str, builtins.list[int]], builtins.list[DamagedSegment]]:
        """Before retention records and deletes what it chose from a manifest view:
        ``(gone, damaged)``, the chosen seqs whose ``.meta`` is no longer there (removed
        by hand: dropped from the manifest here) and those whose ``.meta`` fails
        verification (the evidence is never deleted). One existence check per chosen
        segment whose metadata this instance verified, one read for the others."""
        gone: dict[str, builtins.list[int]] = {}
        damaged: builtins.list[DamagedSegment] = []
        for p, seqs in deletions.items():
            for seq in seqs:
                if self.cached(p, seq) is not None:
                    if self.is_published(p, seq):
                        continue
                    found: Found | None = None
                else:
                    found = self.probe(p, seq)
                if found is None:
                    gone.setdefault(p, []).append(seq)
                elif isinstance(found, DamagedSegment):
                    damaged.append(found)
        for p, seqs in gone.items():
            log.warning("quiver.segment.vanished partition=%s seqs=%s", p, seqs)
            self.forget(p, seqs)
            self._manifest_remove(p, seqs)
        if damaged:
            self.mark_damaged(damaged)
        return gone, damaged

    def prepare_removal(self, partition: str, seqs: Iterable[int]) -> builtins.list[int]:
        """Object root, while retention plans to delete ``seqs``: the staged objects
        still left for the transactions they hold are removed (a writer's drop after
        sealing is best effort; once the segments are gone a MANIFEST rebuilt from a
        listing could not name those transactions, and a leftover would be sealed
        again, §12.6): one LIST of ``txns/`` when they name transactions, one DELETE per
        leftover. Removing a leftover is harmless even if the segment then stays (its
        transaction is sealed: the MANIFEST names it). Once the plan is final,
        :meth:`record_removal` keeps the removal in GONE.

        Returns the seqs to hold this pass (logged ``quiver.gc.held``): those naming a
        transaction whose leftover could not be removed (all that name one when the
        LIST failed). Nothing raises."""
        doomed = sorted(set(seqs))
        if self.manifests is None or not doomed:
            return []
        copy = self._copies.get(partition)
        named: dict[int, set[int]] = {q: set() for q in doomed}
        if copy is not None:
            for e in copy.entries:
                if e.seq in named:
                    named[e.seq].update(e.txns)
        for q in doomed:
            meta = self.cached(partition, q)
            if meta is not None:
                named[q].update(meta.txns)
        txns = {t for ts in named.values() for t in ts}
        held: set[int] = set()
        objects = self.manifests.objects
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
        """Object root, just before retention records ``seqs`` deleted (the plan's
        last word): join their removal (seqs gone, the high, the transactions they
        held, retired) into the partition's GONE (§12.4), so that a MANIFEST rebuilt
        later never brings them back, whatever happens to the pass after. OSError when
        GONE cannot be written: the caller keeps these segments this pass."""
        doomed = sorted(set(seqs))
        if self.manifests is None or not doomed or not self.manifests.keeps_facts:
            return
        copy = self._copies.get(partition)
        named = self._named.get(partition, {})
        base = copy if copy is not None else Manifest(partition)
        retired = tuple(sorted(t for q in doomed for t in named.get(q, ())))
        self.manifests.keep_facts(
            base.removed(doomed).with_facts(Manifest(partition, txns_gone=retired))
        )

    def _manifest_remove(self, partition: str, seqs: builtins.list[int]) -> None:
        """Before any file goes: the seqs leave the MANIFEST, recorded gone (so a
        listing-built or re-applied change never brings them back)."""
        if self.manifests is None or not seqs:
            return
        self.manifests.update(
            partition,
            lambda m: m.removed(seqs),
            build=lambda: self.manifest_from_listing(partition),
        )

    def finish_deletes(self, partition: str, seqs: Iterable[int]) -> builtins.list[int]:
        """Remove the ``.arrow`` left by a deletion that died between its unlinks, for
        ``seqs`` the caller knows were deleted (the ack log records them and their
        ``.meta`` is gone): one existence check each. Returns the seqs finished."""
        left = [q for q in seqs if self._b.has_file(self._paths(partition, q)[0])]
        if left:
            self._b.remove([self._paths(partition, q)[0] for q in left])
            log.info("quiver.segment.delete_finished partition=%s seqs=%s", partition, left)
        return left

    def cleanup(self, partition: str, *, unpublished: bool = True) -> CleanupReport:
        """Remove ``*.tmp`` files and (``unpublished``) unpublished ``.arrow`` files of
        ``partition``.

        ``max_seq_seen`` is the highest seq of any segment file found, orphans and
        quarantined ones included, so the store's sequence floor never reuses one.
        An object root's writer passes ``unpublished=False``: it never removes an
        object it did not publish (another holder's upload in flight), and starts
        above every seq seen instead (§12.4).
        """
        validate_name("partition", partition)
        d = self._b.join(partition)
        names = list(self._b.entries(d))
        quarantined = list(self._b.entries(self._b.join(partition, QUARANTINE_DIR)))
        published = {s for n in names if (s := parse_seq(n, META_SUFFIX))}
        doomed = [
            f"{d}/{n}"
            for n in names
            if n.endswith(TMP_SUFFIX)
            or (
                unpublished
                and (s := parse_seq(n, SEGMENT_SUFFIX)) is not None
                and s not in published
            )
        ]
        max_seq = max((parse_segment_file_seq(n) or 0 for n in names + quarantined), default=0)
        max_published = max(
            [*published, *(parse_segment_file_seq(n) or 0 for n in quarantined)], default=0
        )
        removed = [self._b.display(p) for p in self._b.remove(doomed)]
        if removed:
            log.info("quiver.segment.cleanup partition=%s removed=%s", partition, removed)
        return CleanupReport(removed=removed, max_seq_seen=max_seq, max_published_seq=max_published)

    def quarantine(self, partition: str, seq: int, reason: str) -> str:
        """Move a damaged segment's files to ``<pid>/quarantine/`` with a reason file.

        The ``.meta`` moves first (unpublishing the segment), then the ``.arrow``.
        Returns where the ``.arrow`` went (or the ``.meta`` if there was no ``.arrow``).
        """
        self.forget(partition, [seq])
        self._manifest_remove(partition, [seq])
        shown = move_aside(self._files, partition, seq, reason)
        self.quarantined_total += 1
        return shown
