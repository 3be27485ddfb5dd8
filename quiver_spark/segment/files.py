"""The segment files of one location, named, listed and read: the ground both
publication protocols stand on (ARCHITECTURE.md §5.3, §11.2, §5.4).

Segments of partition ``<pid>`` are ``<pid>/<seq:020d>.arrow`` plus
``<seq:020d>.meta`` under the backend's root; moved-aside ones are in
``<pid>/quarantine/``. :class:`SegmentFiles` names them, lists them, reads and verifies
``.meta`` files and caches what it verified (a published ``.meta`` never changes).
Which of them are published is not its question: a
:class:`~quiver_spark.segment.publication.Publication` answers that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .. import layout
from ..config import validate_name
from ..errors import CorruptionError, SegmentMissingError
from .backend import SegmentBackend
from .meta import SegmentMeta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DamagedSegment:
    """A published segment whose ``.meta`` fails verification (see
    :meth:`~quiver_spark.segment.catalog.SegmentLocation.survey`).

    ``path`` names the damaged ``.meta``; ``size_bytes`` is its ``.arrow``'s length
    from the directory listing (0 when that is gone), so space accounting still sees it.
    """

    partition: str
    seq: int
    path: str
    error: str
    size_bytes: int


@dataclass(frozen=True)
class SegmentListing:
    """The segment files of one partition directory, from one listing (nothing is read)."""

    published: list[int]
    """Seqs with a ``.meta`` (visible), sorted."""
    unpublished: list[int]
    """Seqs with an ``.arrow`` and no ``.meta`` (an interrupted finalize or delete,
    which :meth:`~quiver_spark.segment.catalog.SegmentLocation.cleanup` removes), sorted."""


@dataclass(frozen=True)
class SegmentSurvey:
    """The published segments of one partition: readable metadata and damaged ones."""

    metas: list[SegmentMeta]
    damaged: list[DamagedSegment]


Found = SegmentMeta | DamagedSegment
"""A published segment as a probe finds it: its verified metadata or the damage."""

MetaReader = Callable[[str, int], SegmentMeta]
"""Reads and verifies the ``.meta`` of ``(partition, seq)``: SegmentMissingError
without one, CorruptionError when it fails verification."""


class SegmentFiles:
    """The files of a location's segments through ``backend``, and the metadata
    verified once (no publication decision is made here)."""

    def __init__(self, backend: SegmentBackend) -> None:
        self.backend = backend
        # partition -> seq -> metadata verified once: a published .meta never changes,
        # and a listing or a probe decides what still exists (ARCHITECTURE.md §11.2)
        self._meta_cache: dict[str, dict[int, SegmentMeta]] = {}

    def paths(self, partition: str, seq: int) -> tuple[str, str]:
        """``(arrow, meta)``: where segment ``seq`` of ``partition`` is (or would be)."""
        validate_name("partition", partition)
        arrow, meta = layout.segment_data(partition, seq), layout.segment_meta(partition, seq)
        return self.backend.join(arrow), self.backend.join(meta)

    def shown_meta(self, partition: str, seq: int) -> str:
        """Segment ``seq``'s ``.meta`` as messages show it."""
        return self.backend.display(self.paths(partition, seq)[1])

    # -- listing ------------------------------------------------------------------
    def listing(self, partition: str) -> SegmentListing:
        """Seqs with a ``.meta`` and seqs with only an ``.arrow``, from one listing."""
        validate_name("partition", partition)
        entries = self.backend.entries(self.backend.join(partition))
        published = sorted(s for n in entries if (s := layout.parse_segment_meta(n)))
        arrows = {s for n in entries if (s := layout.parse_segment_data(n))}
        return SegmentListing(published, sorted(arrows - set(published)))

    def quarantined(self, partition: str) -> dict[int, str]:
        """Seqs of ``partition`` with a file in ``quarantine/``, each mapped to the path
        of the file that says why (its ``.reason`` when there is one): one listing."""
        validate_name("partition", partition)
        qdir = self.backend.join(layout.quarantine_dir(partition))
        out: dict[int, str] = {}
        for n in sorted(self.backend.entries(qdir)):
            seq = layout.parse_quarantined_seq(n)
            if seq is not None and (seq not in out or layout.is_quarantine_reason(n)):
                out[seq] = f"{qdir}/{n}"
        return out

    # -- reading metadata ---------------------------------------------------------
    def read_meta(self, partition: str, seq: int) -> SegmentMeta:
        """The metadata in segment ``seq``'s ``.meta``; SegmentMissingError without one."""
        _, meta_path = self.paths(partition, seq)
        shown = self.backend.display(meta_path)
        try:
            raw = self.backend.read_small(meta_path)
        except FileNotFoundError as e:
            raise SegmentMissingError(partition, seq, f"not published ({shown} missing)") from e
        return self._decode(partition, seq, raw)

    def _decode(self, partition: str, seq: int, raw: bytes) -> SegmentMeta:
        shown = self.shown_meta(partition, seq)
        meta = SegmentMeta.decode(shown, raw)
        if (meta.partition, meta.seq) != (partition, seq):
            raise CorruptionError(shown, 0, f"meta names {meta.partition}/{meta.seq}")
        return meta

    def same_segment(
        self, partition: str, seq: int, crc: int, size: int, ranges: tuple[tuple[int, int], ...]
    ) -> SegmentMeta | None:
        """The metadata in segment ``seq``'s ``.meta`` when it is this very segment (a
        retry: same checksum, size and WAL ranges), None when it is another one; what
        :meth:`read_meta` raises otherwise (CorruptionError for a damaged ``.meta``)."""
        old = self.read_meta(partition, seq)
        if (old.checksum, old.size_bytes, old.wal_ranges) == (crc, size, ranges):
            log.info("quiver.segment.publish_repeat partition=%s seq=%d", partition, seq)
            return old
        return None

    def probe(
        self, partition: str, seq: int, *, strict: bool = False, read: MetaReader | None = None
    ) -> Found | None:
        """Segment ``seq``'s metadata (verified once, then cached), or a
        :class:`DamagedSegment` when its ``.meta`` fails verification (raised instead
        with ``strict``); None when it has no ``.meta``. One read when not cached,
        through ``read`` (default :meth:`read_meta`)."""
        hit = self._meta_cache.get(partition, {}).get(seq)
        if hit is not None:
            return hit
        try:
            meta = (read or self.read_meta)(partition, seq)
        except SegmentMissingError:
            return None
        except CorruptionError as e:
            if strict:
                raise
            return self._damaged(partition, seq, e)
        self._meta_cache.setdefault(partition, {})[seq] = meta
        return meta

    def probe_next(
        self, starts: Mapping[str, int], skip: Callable[[str, int], bool] | None
    ) -> dict[str, list[Found]]:
        """For each partition, the segments with a ``.meta`` from seq ``starts[p]`` on,
        up to the first seq without one (seqs are gapless, §5); ``skip(p, seq)`` true
        passes over a seq known to be gone (asked first: cached metadata of a segment
        deleted since is not served). One read per new segment plus one per partition
        for the miss; each round's reads (one per partition) are sent together."""
        out: dict[str, list[Found]] = {p: [] for p in starts}
        nxt = {validate_name("partition", p): s for p, s in starts.items()}
        while nxt:
            batch: dict[str, str] = {}
            for p in list(nxt):
                cache = self._meta_cache.get(p, {})
                while True:  # skipped seqs and cached metadata need no request
                    if skip is not None and skip(p, nxt[p]):
                        cache.pop(nxt[p], None)  # gone: never served from the cache again
                    elif (hit := cache.get(nxt[p])) is not None:
                        out[p].append(hit)
                    else:
                        break
                    nxt[p] += 1
                batch[p] = self.paths(p, nxt[p])[1]
            raw = self.backend.read_many(list(batch.values()))
            for p, path in batch.items():
                found = self._decoded(p, nxt[p], raw[path])
                if found is None:
                    del nxt[p]
                else:
                    out[p].append(found)
                    nxt[p] += 1
        return out

    def survey(
        self,
        partition: str,
        seqs: Iterable[int],
        *,
        strict: bool,
        read: MetaReader | None = None,
    ) -> SegmentSurvey:
        """The segments ``seqs`` of ``partition`` (a publication's answer), each probed
        (:meth:`probe`, ``read``): readable metadata and damaged ones (raised instead
        with ``strict``). Cached metadata of seqs not among them (deleted or moved
        aside since) is dropped."""
        listed = list(seqs)
        metas: list[SegmentMeta] = []
        damaged: list[DamagedSegment] = []
        cache = self._meta_cache.setdefault(partition, {})
        for gone in set(cache) - set(listed):  # deleted or moved aside since
            del cache[gone]
        for seq in listed:
            found = self.probe(partition, seq, strict=strict, read=read)
            if isinstance(found, DamagedSegment):
                damaged.append(found)
            elif found is not None:  # None: deleted between listing and reading
                metas.append(found)
        return SegmentSurvey(metas, damaged)

    def _decoded(self, partition: str, seq: int, raw: bytes | None) -> Found | None:
        if raw is None:
            return None
        try:
            meta = self._decode(partition, seq, raw)
        except CorruptionError as e:
            return self._damaged(partition, seq, e)
        self._meta_cache.setdefault(partition, {})[seq] = meta
        return meta

    def _damaged(self, partition: str, seq: int, error: CorruptionError) -> DamagedSegment:
        arrow_path, meta_path = self.paths(partition, seq)
        shown = self.backend.display(meta_path)
        log.warning(
            "quiver.segment.meta_damaged partition=%s seq=%d path=%s error=%s",
            partition,
            seq,
            shown,
            error,
        )
        return DamagedSegment(partition, seq, shown, str(error), self.backend.size(arrow_path) or 0)

    # -- the verified-metadata cache ------------------------------------------------
    def cached(self, partition: str, seq: int) -> SegmentMeta | None:
        """Metadata already verified (no request), or None."""
        return self._meta_cache.get(partition, {}).get(seq)

    def forget(self, partition: str, seqs: Iterable[int]) -> None:
        """Drop cached metadata of segments known to be gone."""
        cache = self._meta_cache.get(partition)
        if cache:
            for seq in seqs:
                cache.pop(seq, None)
