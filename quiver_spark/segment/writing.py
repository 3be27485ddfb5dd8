"""The write path of a :class:`~quiver_spark.segment.catalog.SegmentLocation`: how a
segment becomes durable and then published (ARCHITECTURE.md §5.2, §11.2, §11.3, §10.2).

Phase one (:meth:`SegmentWriting.write_data`) makes the ``.arrow`` durable and returns
its metadata, unpublished; phase two (:meth:`SegmentWriting.publish`) announces its
publication hint (§12) and publishes it through the location's
:class:`~quiver_spark.segment.publication.Publication`: its ``.meta``, or on an object
root its MANIFEST entry, with the transactions the segment holds and those its writer
retires. A sealer publishes a staged transaction the same way
(:meth:`SegmentWriting.publish_staged`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import pyarrow as pa

from ..config import SegmentConfig
from ..control.txn_retirement import NOTHING_RETIRED, TxnRetirement
from ..errors import InvalidArgumentError, LeaseLostError, SegmentMissingError, SeqTakenError
from .backend import Consume, SegmentBackend
from .files import SegmentFiles
from .hints import announce, hints_of
from .meta import SegmentMeta, schema_fingerprint
from .publication import Publication
from .writer import Serialized, coalesce, event_time_range, prepare, serialize

log = logging.getLogger("quiver_spark.segment.catalog")
"""A publication's log lines keep the logger they always had."""


class SegmentWriting:
    """The write path a :class:`~quiver_spark.segment.catalog.SegmentLocation` extends
    (see the module docstring); the location sets up the storage, files, publication
    and hints below when it opens."""

    _b: SegmentBackend
    """A local directory (fsynced), fsspec, a bucket, or an object root's store."""
    _files: SegmentFiles
    _publication: Publication
    _hinted: dict[str, list[int]]
    """Per partition, the hints this instance knows are there (§12)."""

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
            raise InvalidArgumentError("seq", seq, ">= 1", f"segment seq must be >= 1, got {seq}")
        _, meta_path = self._paths(partition, seq)
        ranges = tuple((int(lo), int(hi)) for lo, hi in wal_ranges)
        table = prepare(batches)
        lo_et, hi_et = event_time_range(table, event_time_column)

        def fill(consume: Consume) -> Serialized:
            return serialize(
                consume, table.schema, coalesce(table, target_batch_rows), compression=compression
            )

        if self._b.exists(meta_path):
            stats = fill(lambda _view: None)  # checksum only: is this a retry?
            return self._publication.same_or_raise(
                partition, seq, stats.checksum, stats.size_bytes, ranges
            )
        self._b.makedirs(self._b.join(partition))
        stats = self._publication.create_arrow(partition, seq, fill)
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

    def publish(
        self,
        meta: SegmentMeta,
        *,
        again: bool = False,
        txns: Iterable[int] = (),
        sealed_by: int | None = None,
        retirement: TxnRetirement = NOTHING_RETIRED,
    ) -> None:
        """Phase two of :meth:`write`: durably create the ``.meta``, making it visible.

        Refuses (SegmentMissingError) when the ``.arrow`` is absent or has another
        size. Idempotent for the same segment; a different one already published
        under this seq raises :class:`SegmentExistsError`. ``again`` writes the same
        ``.meta`` anew even when it exists (a new file, renamed over it, then the
        directory fsynced): for a publication that failed after its rename, whose
        name may not be durable. ``txns`` (object root): the transactions whose rows
        the segment holds, recorded in its MANIFEST entry (§10.2); ``sealed_by``: the
        epoch of a sealer publishing a staged transaction; ``retirement``: the
        transactions the writer retires, recorded with the entry (§10.2). On an object
        root the MANIFEST step is the publication; the ``.meta`` made for one it
        refuses is removed again.
        """
        txns = tuple(txns)
        arrow_path, meta_path = self._paths(meta.partition, meta.seq)
        self._announce(meta.partition, meta.seq)
        if self._b.exists(meta_path):
            self._publication.same_or_raise(
                meta.partition, meta.seq, meta.checksum, meta.size_bytes, meta.wal_ranges
            )
            if not again:
                self._publication.manifest_step(meta.partition, [meta], txns, sealed_by, retirement)
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
        made = self._publication.make_meta(meta, txns, sealed_by)
        log.info(
            "quiver.segment.publish partition=%s seq=%d rows=%d bytes=%d batches=%d",
            meta.partition,
            meta.seq,
            meta.rows,
            meta.size_bytes,
            meta.batches,
        )
        try:
            self._publication.manifest_step(meta.partition, [meta], txns, sealed_by, retirement)
        except (LeaseLostError, SeqTakenError):
            if made is not None:
                self._publication.unmake_meta(meta.partition, meta.seq, made)
            raise

    def _announce(self, partition: str, seq: int) -> None:
        """The publication hint of ``seq``, before anything makes it visible (§12);
        the first one of this instance for ``partition`` lists the hints there once,
        so the older ones are removed."""
        if not self._b.lists_levels:
            return
        known = self._hinted.get(partition)
        if known is None:
            known = hints_of(self._b, partition)
        if seq in known and seq == max(known):
            self._hinted[partition] = known
            return
        announce(self._b, partition, seq, known)
        self._hinted[partition] = [s for s in known if s > seq] + [seq]

    def publish_staged(
        self,
        partition: str,
        txn_id: int,
        batches: list[pa.RecordBatch],
        *,
        ingestion_ns: int,
        epoch: int,
        target_batch_rows: int = SegmentConfig.target_batch_rows,
        event_time_column: str | None = None,
        first_seq: int = 0,
    ) -> SegmentMeta | None:
        """Object root: publish the rows of committed staged transaction ``txn_id`` as
        the partition's next segment, by a sealer holding the partition's lease at
        ``epoch`` (ARCHITECTURE.md §10.2). The MANIFEST step is the publication: it
        records the transaction in the entry (``sealed_by`` = ``epoch``) and is a
        no-op when the transaction is sealed already (None is returned then). A seq
        whose ``.meta`` another holder made is recorded void and the next one used; a
        later epoch in the MANIFEST raises ``FencedError``."""

        def write(seq: int) -> SegmentMeta:
            return self.write_data(
                partition,
                seq,
                batches,
                min_ingestion_ns=ingestion_ns,
                max_ingestion_ns=ingestion_ns,
                wal_ranges=(),
                event_time_column=event_time_column,
                target_batch_rows=target_batch_rows,
            )

        def publish(meta: SegmentMeta) -> None:
            self.publish(meta, txns=(txn_id,), sealed_by=epoch)

        return self._publication.publish_staged(partition, txn_id, first_seq, write, publish)
