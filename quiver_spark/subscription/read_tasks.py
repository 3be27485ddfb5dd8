"""Read tasks: what one parallel reader of a store reads, planned and served
(ARCHITECTURE.md §17, §18).

A read plan is a list of :class:`ReadTask`: record-batch ranges of one or more segments
(small segments are packed into one task, large ones split, see
:func:`pack_read_tasks`), with everything a reader on another machine needs to serve
them: where the segments live, the store's root and what to do about a segment that is
gone (the data-loss policy, :class:`~quiver_spark.dataloss.LossPolicy`). A task is plain
picklable data; :func:`read_task` serves it, opening each segment (size and CRC-32C
checked) before any of its rows.

:func:`plan_batch_read` plans a read of every retained segment (a batch read): each
published segment that is neither there nor deleted follows the data-loss policy, and
segments whose statistics cannot match the given comparisons are skipped
(:mod:`quiver_spark.pruning`). The Spark source wraps these tasks in its input
partitions; nothing here imports Spark.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..dataloss import LossPolicy, evidence
from ..errors import CorruptionError, DataLossError, InvalidArgumentError
from ..fs import DEFAULT_IO
from ..objects import open_objects
from ..pruning import Prune, keep, prune_of
from ..root_kind import root_kind
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..subscribers import open_registry

log = logging.getLogger(__name__)

Piece = tuple[SegmentMeta, int, int]
"""Record batches ``[start, stop)`` of one segment: what a read task reads of it."""

Comparison = tuple[str, str, Sequence[Any]]
"""``(column, op, values)``: a comparison a reader's rows are filtered by, ``op`` one of
:data:`quiver_spark.pruning.OPS`; segments that cannot hold a matching row are skipped."""

OPEN_COST_BYTES = 4 * 1024 * 1024
"""What opening one segment counts for when small segments are packed into read tasks
(as Spark's ``spark.sql.files.openCostInBytes``): many tiny segments still make
several tasks instead of one."""


@dataclass(frozen=True)
class ReadTask:
    """One read task: record-batch ranges of one or more segments, read in order.

    Attributes
    ----------
    pieces
        ``(meta, batch_start, batch_stop)`` per segment: the published metadata the
        segment is verified against and the record-batch range read from it (the
        whole segment unless a large one was split).
    segments_url, storage_options
        Where segments live and how to reach them.
    root, subscriber, fail_on_data_loss
        Data-loss handling: where to record a skipped segment and whether to fail.
    """

    pieces: tuple[Piece, ...]
    segments_url: str
    root: str
    subscriber: str | None
    fail_on_data_loss: bool
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.pieces:
            raise InvalidArgumentError(
                "pieces", 0, "at least one segment", "a read task reads at least one segment"
            )

    @property
    def metas(self) -> list[SegmentMeta]:
        """The segments this task reads (a split segment's once per range)."""
        return [m for m, _, _ in self.pieces]


def split_segment(meta: SegmentMeta, split_size_bytes: int) -> list[tuple[int, int]]:
    """Record-batch ranges reading ``meta``: one range unless it exceeds the split size."""
    n = max(meta.batches, 1)
    parts = min(n, max(1, -(-meta.size_bytes // split_size_bytes)))
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def pack_read_tasks(
    metas: Sequence[SegmentMeta], split_size_bytes: int, *, min_tasks: int = 1
) -> list[list[Piece]]:
    """The read tasks of ``metas``: large segments split, small ones packed.

    A segment larger than the split size is read by several tasks, one per
    record-batch range of :func:`split_segment`. The other segments are packed,
    consecutive ones together, so that a micro-batch of many small segments does not
    pay Spark's fixed cost of a task per segment (~30 ms of wall time per task
    measured on local[2], as much as serving ~3 MB): into ``ceil(bytes /
    split_size_bytes)`` tasks of about equal bytes, each segment counting at least
    :data:`OPEN_COST_BYTES`, but never fewer tasks in all than ``min_tasks`` (the
    parallelism to keep) when there are enough segments.
    """
    tasks: list[list[Piece]] = []
    small: list[tuple[SegmentMeta, int]] = []
    for m in metas:
        ranges = split_segment(m, split_size_bytes)
        if len(ranges) > 1:
            tasks.extend([(m, b0, b1)] for b0, b1 in ranges)
        else:
            small.append((m, max(m.size_bytes, OPEN_COST_BYTES)))
    if not small:
        return tasks
    total = sum(cost for _, cost in small)
    wanted = max(-(-total // split_size_bytes), min_tasks - len(tasks))
    packs = max(1, min(len(small), wanted))  # never more groups than segments
    mids, done = [], 0
    for _, cost in small:  # each segment's middle, in cumulative bytes
        mids.append(2 * done + cost)
        done += cost
    # group k starts at the first segment whose middle passes k/packs of the bytes
    # (contiguous groups of about equal bytes), but at least one segment after group
    # k-1's start and early enough to leave one segment to each later group
    starts: list[int] = []
    for k in range(packs):
        want = bisect.bisect_left(mids, 2 * total * k / packs) if k else 0
        lo = starts[-1] + 1 if starts else 0
        starts.append(min(max(want, lo), len(small) - (packs - k)))
    bounds = [*starts, len(small)]
    return tasks + [
        [(m, 0, m.batches) for m, _ in small[bounds[k] : bounds[k + 1]]] for k in range(packs)
    ]


def read_tasks(
    metas: Sequence[SegmentMeta],
    store: QuiverStore,
    *,
    subscriber: str | None,
    fail_on_data_loss: bool,
    split_size_bytes: int,
    min_tasks: int = 1,
    storage_options: Mapping[str, Any] | None = None,
) -> list[ReadTask]:
    """The tasks reading ``metas`` of ``store`` (:func:`pack_read_tasks`), each carrying
    what a reader elsewhere needs; ``storage_options``: the root's client settings."""
    return [
        ReadTask(
            tuple(pieces),
            segments_url=store.segments_url,
            root=store.root,
            subscriber=subscriber,
            fail_on_data_loss=fail_on_data_loss,
            storage_options=dict(storage_options or {}),
        )
        for pieces in pack_read_tasks(metas, split_size_bytes, min_tasks=min_tasks)
    ]


def plan_batch_read(
    store: QuiverStore,
    *,
    fail_on_data_loss: bool,
    split_size_bytes: int,
    comparisons: Iterable[Comparison] = (),
    min_tasks: int = 1,
    storage_options: Mapping[str, Any] | None = None,
) -> list[ReadTask]:
    """The tasks of a batch read of every retained segment of ``store``.

    A segment that was published and is neither there nor deleted, or whose ``.meta``
    fails verification, is settled by the data-loss policy (a batch read records under
    ``_batch``). A segment whose statistics show that no row can match every one of
    ``comparisons`` is skipped; the rows of the others are not filtered here (the
    caller filters them), so skipping only ever saves reads.
    """
    arrow = store.schema() if comparisons else None
    prunes: list[Prune] = [
        pr
        for column, op, values in comparisons
        if (pr := prune_of(column, op, values, arrow)) is not None
    ]
    kind = store.kind
    policy = LossPolicy(
        store.root,
        None,
        lost=kind.lost_log(store.root, None, store.objects, store.io),
        journal=kind.journal,
        objects=store.objects,
        fail_on_data_loss=fail_on_data_loss,
    )
    # creates nothing
    registry = open_registry(store.root, journal=kind.journal, objects=store.objects)
    try:
        found = {p: evidence(store.segment_location, registry, p) for p in store.partitions()}
    finally:
        if registry is not None:
            registry.close()
    kept: list[SegmentMeta] = []
    total = 0
    for meta in policy.retained(store.segment_location, found):
        total += 1
        if keep(meta, prunes):
            kept.append(meta)
    tasks = read_tasks(
        kept,
        store,
        subscriber=None,
        fail_on_data_loss=fail_on_data_loss,
        split_size_bytes=split_size_bytes,
        min_tasks=min_tasks,
        storage_options=storage_options,
    )
    log.info(
        "quiver.source.batch_plan segments=%d kept=%d tasks=%d filters=%d",
        total,
        len(kept),
        len(tasks),
        len(prunes),
    )
    return tasks


def read_task(
    task: ReadTask, *, row_numbers: bool = False
) -> Iterator[tuple[SegmentMeta, int, pa.RecordBatch]]:
    """Serve one :class:`ReadTask`: ``(meta, first_row, batch)`` for each record batch,
    ``first_row`` the batch's first row's 0-based position in its segment (counted only
    with ``row_numbers``, else 0).

    Segments are read one after the other; each is opened (size and CRC-32C checked
    against its metadata) before any of its rows is served, and one that cannot be
    read follows the data-loss policy (:meth:`LossPolicy.open`) on its own.
    """
    kind = root_kind(task.root)  # an executor has no store: the class builds the parts
    objects = open_objects(task.root, task.storage_options or None)
    location = kind.read_location(
        task.segments_url, objects, io=DEFAULT_IO, storage_options=task.storage_options
    )
    policy = LossPolicy(
        task.root,
        task.subscriber,
        lost=kind.lost_log(task.root, task.subscriber, objects, DEFAULT_IO),
        journal=kind.journal,
        objects=objects,
        fail_on_data_loss=task.fail_on_data_loss,
    )
    for meta, batch_start, batch_stop in task.pieces:
        reader = policy.open(location, meta)
        if reader is None:  # settled by the data-loss policy
            continue
        log.debug(
            "quiver.source.segment_open partition=%s seq=%d batches=%d:%d",
            meta.partition,
            meta.seq,
            batch_start,
            batch_stop,
        )
        with reader:
            row = 0
            if row_numbers:
                row = sum(reader.read_batch(i).num_rows for i in range(batch_start))
            try:
                for batch in reader.batches(batch_start, batch_stop):
                    yield meta, row, batch
                    row += batch.num_rows
            except CorruptionError as e:  # unreachable after a verified open; never serve it
                raise DataLossError(meta.partition, meta.seq, f"corrupt ({e})") from e


def lost_report(
    root: str, subscriber: str | None, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Segments a reader skipped, deduplicated (see :meth:`~quiver_spark.dataloss.LostLog.report`); on an
    object root, from its ``readers/`` objects."""
    objects = open_objects(root, storage_options or None)
    return root_kind(root).lost_log(root, subscriber, objects, DEFAULT_IO).report()
