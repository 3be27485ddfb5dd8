"""Data loss: why a published segment cannot be read, and what a reader does about it
(ARCHITECTURE.md §17, §18).

A partition's writer allocates segment seqs without gaps (an interrupted finalize
that never published reuses its seq), so every seq from 1 up to the highest one that
left a trace (published, quarantined, or recorded deleted in the ack log) was
published at some point. A reader that meets such a seq without a ``.meta``
classifies it from the ack log and the segment location only
(:class:`PartitionEvidence`, a :class:`MissingSegment` of one
:class:`~quiver_spark.errors.MissingKind`):

- ``deleted``: retention recorded its deletion (every subscriber that had not
  acknowledged it got ``dropped``): expected, never data loss;
- ``quarantined``: a file for it is in ``<pid>/quarantine/`` (``quiver fsck
  --quarantine`` moved it there): data loss, the reason file is named;
- ``missing``: no trace at all: data loss;
- ``corrupt``: its ``.meta`` or its file fails verification: data loss.

:class:`LossPolicy` is the one data-loss policy every reader applies (a subscription,
a Spark read task, a batch read): a deleted segment is skipped and counted as
dropped; data loss fails the read under ``fail_on_data_loss``, else is skipped and
counted; either way one line goes to the reader's :class:`LostLog` (on an object root an
:class:`ObjectLostLog`, which the root's kind builds). Engine code only (no Spark), so
every decision is testable without a JVM.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import layout
from .control import cas
from .errors import (
    CorruptionError,
    DataLossError,
    MissingKind,
    SegmentMissingError,
)
from .fs import DEFAULT_IO, FileIO
from .metrics import SOURCE_DROPPED, SOURCE_LOST, Metrics
from .objects import ObjectStore
from .seams import NO_DELETIONS, DeletedSegments
from .segment import SegmentLocation, SegmentMeta, SegmentReader
from .subscribers import JournalKind, open_registry

log = logging.getLogger(__name__)

BATCH_READS = "_batch"
"""The lost-log name and metric label of batch reads (they have no subscriber)."""
OPEN_RETRY_S = 0.5
"""Pause before the one retry of a planned segment whose file was not found."""


# -- classification -------------------------------------------------------------------------
class SegmentFacts(Protocol):
    """What the segment location knows (``SegmentLocation`` has this)."""

    def published_seqs(self, partition: str) -> list[int]: ...

    def quarantined(self, partition: str) -> dict[int, str]: ...

    def quarantine_note(self, partition: str, seq: int) -> str: ...


@dataclass(frozen=True)
class MissingSegment:
    """A seq of ``partition`` that was published and cannot be read now.

    ``kind`` says why; ``evidence`` names the quarantine reason file (or the damaged
    file), ``note`` is the reason it holds (or the verification error).
    """

    partition: str
    seq: int
    kind: MissingKind
    evidence: str | None = None
    note: str = ""

    @classmethod
    def corrupt(cls, partition: str, seq: int, error: CorruptionError) -> MissingSegment:
        """A published segment whose ``.meta`` or file fails verification."""
        return cls(partition, seq, MissingKind.CORRUPT, error.path, str(error))

    @property
    def data_loss(self) -> bool:
        """True unless retention deleted it on purpose (recorded ``dropped``)."""
        return self.kind is not MissingKind.DELETED

    def describe(self) -> str:
        """What happened, for an error message or a log line (the kind not repeated)."""
        if self.kind is MissingKind.DELETED:
            return "by retention (recorded dropped for subscribers that had not acked it)"
        if self.kind is MissingKind.QUARANTINED:
            why = f": {self.note}" if self.note else ""
            return f"moved aside by `quiver fsck --quarantine`, reason file {self.evidence}{why}"
        if self.kind is MissingKind.CORRUPT:
            where = f" ({self.evidence})" if self.evidence else ""
            return (
                f"fails verification{where}: {self.note}"
                if self.note
                else f"fails verification{where}"
            )
        return "published, then gone without a deletion record or a quarantine file"

    def error(self, hint: str = "") -> SegmentMissingError:
        """The error naming partition, seq, what happened and ``hint``."""
        more = f"; {hint}" if hint else ""
        return SegmentMissingError(
            self.partition,
            self.seq,
            f"{self.kind}: {self.describe()}{more}",
            kind=self.kind,
            evidence=self.evidence,
        )


@dataclass(frozen=True)
class PartitionEvidence:
    """One snapshot of what is known about the seqs of a partition."""

    partition: str
    published: frozenset[int]
    quarantined: dict[int, str]
    notes: dict[int, str]
    deleted: frozenset[int]  # recorded deleted above ``deleted_floor``
    deleted_floor: int  # every seq up to this one is recorded deleted
    max_deleted: int
    void_floor: int = 0  # object root: every seq up to this one is gone by the MANIFEST
    void: frozenset[int] = frozenset()  # and these: never published there, or gone (§11.3)

    @property
    def highest(self) -> int:
        """The highest seq known to have been published (0 if none)."""
        return max([self.max_deleted, *self.published, *self.quarantined], default=0)

    def is_deleted(self, seq: int) -> bool:
        return seq <= self.deleted_floor or seq in self.deleted

    def is_void(self, seq: int) -> bool:
        """Object root: the MANIFEST records ``seq`` gone and it is neither published,
        deleted by retention in the ack log, nor quarantined: never published there
        (another lease holder's seq), so nothing was lost."""
        return (
            seq not in self.published
            and not self.is_deleted(seq)
            and seq not in self.quarantined
            and (seq <= self.void_floor or seq in self.void)
        )

    def classify(self, seq: int) -> MissingSegment | None:
        """None when ``seq`` is published; else why it is not (the caller knows or
        checked that it was published once: ``seq <= highest`` or a planned offset)."""
        if seq in self.published:
            return None
        if self.is_deleted(seq):
            return MissingSegment(self.partition, seq, MissingKind.DELETED)
        if seq in self.quarantined:
            return MissingSegment(
                self.partition,
                seq,
                MissingKind.QUARANTINED,
                self.quarantined[seq],
                self.notes.get(seq, ""),
            )
        if seq <= self.void_floor or seq in self.void:
            return None  # void on an object root: never published, nothing lost
        return MissingSegment(self.partition, seq, MissingKind.MISSING)

    def losses(self, lo: int = 1, hi: int | None = None) -> list[MissingSegment]:
        """Every seq in ``[lo, min(hi, highest)]`` that was published and is neither
        there nor deleted by retention (quarantined or missing), ascending.

        Walks only the holes between known seqs, so millions of deleted seqs cost
        nothing.
        """
        top = self.highest if hi is None else min(hi, self.highest)
        start = max(lo, self.deleted_floor + 1, 1)
        if top < start:
            return []
        known = sorted(s for s in self.published | self.deleted if start <= s <= top)
        out: list[MissingSegment] = []
        prev = start - 1
        for s in [*known, top + 1]:
            for seq in range(prev + 1, s):
                found = self.classify(seq)
                if found is not None and found.data_loss:
                    out.append(found)
            prev = s
        return out

    def first_unread(self) -> int:
        """The lowest seq a subscriber starting at the earliest position must meet:
        the first one that is published or lost (deleted ones before it are
        skipped); ``highest + 1`` when there is none."""
        lost = self.losses()
        return min([*self.published, *(m.seq for m in lost[:1])], default=self.highest + 1)


def evidence(
    location: SegmentFacts,
    registry: DeletedSegments | None,
    partition: str,
    *,
    published: Iterable[int] | None = None,
) -> PartitionEvidence:
    """Gather what is known about ``partition``'s seqs: one listing of the partition
    (unless ``published`` is given), one of its quarantine directory, the ack log."""
    seqs = frozenset(location.published_seqs(partition) if published is None else published)
    quarantined = location.quarantined(partition)
    notes = {s: location.quarantine_note(partition, s) for s in quarantined if s not in seqs}
    marks = registry.deleted_marks(partition) if registry else NO_DELETIONS
    floor, deleted, top = marks.floor, frozenset(marks.above), marks.highest
    voids = getattr(location, "void_seqs", None)
    void_floor, void = voids(partition) if voids is not None else (0, frozenset())
    return PartitionEvidence(
        partition=partition,
        published=seqs,
        quarantined=quarantined,
        notes=notes,
        deleted=deleted,
        deleted_floor=floor,
        max_deleted=top,
        void_floor=void_floor,
        void=void,
    )


def classify_vanished(
    root: str,
    location: SegmentLocation,
    partition: str,
    seq: int,
    *,
    journal: JournalKind,
    objects: ObjectStore,
) -> MissingSegment:
    """Why a planned segment is gone (from a read task): deleted, quarantined, missing;
    ``journal`` is the ack log the root's kind names, ``objects`` the root's objects.

    A registry that cannot be read counts as one that records nothing deleted."""
    reg = None
    try:
        reg = open_registry(root, journal=journal, objects=objects)
    except (OSError, CorruptionError) as e:
        log.warning("quiver.source.registry_unreadable root=%s error=%s", root, e)
    try:
        found = evidence(location, reg, partition).classify(seq)
    finally:
        if reg is not None:
            reg.close()
    return found or MissingSegment(partition, seq, MissingKind.MISSING)


# -- the lost-segment log -------------------------------------------------------------------
class LostLog:
    """``<root>/readers/<subscriber>.lost.jsonl``: segments a consumer skipped or failed
    on (advisory, for operators: one JSON object a line, ARCHITECTURE.md §1)."""

    def __init__(self, root: str, subscriber: str | None, io: FileIO = DEFAULT_IO) -> None:
        name = layout.lost_log(subscriber or BATCH_READS)
        self.path = os.path.join(root, name)
        self.io = io
        self.key = name

    def record(
        self, partition: str, seq: int, reason: str, *, skipped: bool, evidence: str | None
    ) -> None:
        """Append one line; best effort (a log that cannot be written never fails a read).

        Each line is one ``write`` on an ``O_APPEND`` descriptor, so lines written by
        concurrent tasks do not interleave.
        """
        line = {"partition": partition, "seq": seq, "reason": reason, "skipped": skipped}
        if evidence:
            line["evidence"] = evidence
        line["at_ns"] = time.time_ns()
        self._append(json.dumps(line).encode() + b"\n")

    def _append(self, data: bytes) -> None:
        try:
            self.io.mkdir(os.path.dirname(self.path))
            fd = self.io.open_append(self.path)
            try:
                self.io.write(fd, data)
            finally:
                self.io.close(fd)
        except OSError as e:
            log.warning("quiver.source.data_loss_unrecorded path=%s error=%s", self.path, e)

    def _raw(self) -> bytes:
        try:
            return self.io.read_file(self.path)
        except FileNotFoundError:
            return b""

    def report(self) -> dict[str, Any]:
        """Deduplicated: ``{"dropped": n, "lost": n, "segments": [...]}`` (``dropped``:
        deleted by retention, always skipped; ``lost``: skipped with failOnDataLoss=false)."""
        seen: dict[tuple[str, int], dict[str, Any]] = {}
        raw = self._raw()
        for line in raw.splitlines():
            try:
                rec = json.loads(line)
                seen.setdefault((str(rec["partition"]), int(rec["seq"])), rec)
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
        segs = [seen[k] for k in sorted(seen)]
        skipped = [s for s in segs if s.get("skipped")]
        return {
            "dropped": sum(1 for s in skipped if s["reason"] == "dropped"),
            "lost": sum(1 for s in skipped if s["reason"] != "dropped"),
            "segments": segs,
        }


class ObjectLostLog(LostLog):
    """An object root's lost-segment log: the object ``readers/<name>``, rewritten whole
    (read, append a line, replace If-Match; advisory, like the file)."""

    def __init__(self, root: str, subscriber: str | None, objects: ObjectStore) -> None:
        super().__init__(root, subscriber)
        self.objects = objects
        self.path = objects.display(self.key)

    def _append(self, data: bytes) -> None:
        self._record_object(data)

    def _record_object(self, data: bytes) -> None:
        try:  # concurrent tasks: a lost race reads again and appends again
            cas.update(
                self.objects,
                self.key,
                lambda got: (got or b"") + data,
                decode=lambda got: got.data,
                encode=lambda note: note,
                give_up=lambda _: OSError("contended"),
            )
        except OSError as e:
            log.warning("quiver.source.data_loss_unrecorded path=%s error=%s", self.path, e)

    def _raw(self) -> bytes:
        got = self.objects.get(self.key)
        return got.data if got is not None else b""


# -- the policy -----------------------------------------------------------------------------
class LossPolicy:
    """The one data-loss policy, as one reader applies it (ARCHITECTURE.md §18).

    Parameters
    ----------
    root
        The store's root (its ``readers/`` holds the lost log; its ack log tells a
        deleted segment from a lost one).
    subscriber
        The reader's subscriber id; None for a batch read (``_batch``).
    fail_on_data_loss
        Data loss fails the read (True) or is skipped and counted (False).
    lost, journal, objects
        What the root's kind builds: the reader's lost-segment log
        (:meth:`~quiver_spark.root_kind.RootKind.lost_log`) and the ack log it keeps
        (:attr:`~quiver_spark.root_kind.RootKind.journal`), in the root's objects.
    """

    def __init__(
        self,
        root: str,
        subscriber: str | None,
        *,
        lost: LostLog,
        journal: JournalKind,
        objects: ObjectStore,
        fail_on_data_loss: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        self.root = root
        self.subscriber = subscriber
        self.fail_on_data_loss = fail_on_data_loss
        self.metrics = metrics
        self.objects = objects
        self.journal = journal
        self.lost = lost

    def settle(self, found: MissingSegment) -> None:
        """A segment retention deleted is skipped (counted as dropped); any other
        missing one is data loss: recorded, then raised as :class:`DataLossError` under
        ``fail_on_data_loss``, else skipped and counted."""
        label = self.subscriber or BATCH_READS
        if found.kind is MissingKind.DELETED:
            log.warning(
                "quiver.source.segment_dropped partition=%s seq=%d subscriber=%s",
                found.partition,
                found.seq,
                self.subscriber,
            )
            self.lost.record(found.partition, found.seq, "dropped", skipped=True, evidence=None)
            if self.metrics is not None:
                self.metrics.inc(SOURCE_DROPPED, subscriber=label)
            return
        self.lost.record(
            found.partition,
            found.seq,
            found.kind,
            skipped=not self.fail_on_data_loss,
            evidence=found.evidence,
        )
        if self.metrics is not None:
            self.metrics.inc(SOURCE_LOST, subscriber=label, reason=found.kind)
        if self.fail_on_data_loss:
            raise DataLossError(
                found.partition,
                found.seq,
                f"{found.kind}: {found.describe()}; set failOnDataLoss=false to skip it and "
                "count the loss",
                kind=found.kind,
                evidence=found.evidence,
            )
        log.warning(
            "quiver.source.data_loss partition=%s seq=%d reason=%s subscriber=%s",
            found.partition,
            found.seq,
            found.kind,
            self.subscriber,
        )

    def open(
        self, location: SegmentLocation, meta: SegmentMeta, *, verify: bool = True
    ) -> SegmentReader | None:
        """Open a planned segment (size and CRC-32C verified), or settle it and return
        None. A file that is not there is looked for once more after a short pause (an
        object store's read may fail transiently) before it counts as gone."""
        try:
            try:
                return location.open(meta, verify=verify)
            except SegmentMissingError:
                time.sleep(OPEN_RETRY_S)
                return location.open(meta, verify=verify)
        except SegmentMissingError:
            self.settle(
                classify_vanished(
                    self.root,
                    location,
                    meta.partition,
                    meta.seq,
                    journal=self.journal,
                    objects=self.objects,
                )
            )
        except CorruptionError as e:
            self.settle(MissingSegment.corrupt(meta.partition, meta.seq, e))
        return None

    def retained(
        self, location: SegmentLocation, found: Mapping[str, PartitionEvidence]
    ) -> Iterator[SegmentMeta]:
        """The readable segments of every partition in ``found`` (a batch read), after
        settling each one that was published and is neither there nor deleted, and
        each whose ``.meta`` fails verification."""
        for p, ev in found.items():
            for missing in ev.losses():  # published once, neither there nor deleted
                self.settle(missing)
            for seq in sorted(ev.published):
                try:
                    meta = location.read_meta(p, seq)
                except SegmentMissingError:
                    continue  # deleted since the listing
                except CorruptionError as e:
                    self.settle(MissingSegment.corrupt(p, seq, e))
                    continue
                yield meta
