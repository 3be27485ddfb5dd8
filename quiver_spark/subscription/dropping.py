"""What a subscription's acknowledgement does with the segments past its acceptance
horizon (:mod:`quiver_spark.subscription.horizon`): which they are, and the count of those it
recorded ``dropped``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from ..errors import CorruptionError, SegmentMissingError
from ..metrics import SOURCE_HORIZON_DROPPED, SOURCE_HORIZON_DROPPED_ROWS, Metrics
from ..objects import ObjectStore
from ..segment import SegmentMeta
from ..subscribers import records
from .horizon import past

log = logging.getLogger(__name__)

Handed = tuple[bool, tuple[int, ...]]
"""What the batches a process read did with one seq: whether one delivered it, and the
newest cutoffs it was left out under."""

LEFT_OUT_KEPT = 4
"""The cutoffs a seq left out is remembered under: a consumer planning the same range
again and again without acknowledging keeps a bounded record per seq; an ack through a
plan older than these acknowledges the seq when some batch delivered it."""


def note_handed(seen: Handed | None, cutoff_ns: int | None, delivered: bool) -> Handed:
    """``seen`` with one more read of its seq under ``cutoff_ns``."""
    was_delivered, left_out = seen or (False, ())
    if delivered:
        return (True, left_out)
    if cutoff_ns is None or cutoff_ns in left_out:
        return (was_delivered, left_out)
    return (was_delivered, (*left_out, cutoff_ns)[-LEFT_OUT_KEPT:])


def past_horizon(
    meta_of: Callable[[str, int], SegmentMeta | None],
    todo: Mapping[str, Sequence[int]],
    cutoff_ns: int | None,
    handed: Mapping[tuple[str, int], Handed] | None = None,
) -> tuple[dict[str, set[int]], int]:
    """Of ``todo``, the seqs to record dropped and their rows. ``handed`` holds what
    the batches this process read did with a seq, per cutoff it was read under (True:
    delivered; False: left out as past it), so one acknowledgement through several
    batches records exactly what each left out: the batch of the ack's own cutoff
    decides a seq it read (another plan reading the same range later changes nothing),
    else a seq some batch delivered is acknowledged and one every batch left out is
    dropped; a seq no batch of this process read (a
    restarted driver's commit of one batch) is judged by ``cutoff_ns``, its end's. A
    seq's metadata is read (``meta_of``) as :meth:`Subscription.segments` read it (the
    planner's cache): one that cannot be read now was settled by the data-loss policy
    there, and is acknowledged as any unreadable seq is."""
    drops: dict[str, set[int]] = {}
    rows = 0
    handed = handed or {}
    if cutoff_ns is None and not handed:
        return drops, rows
    for p, seqs in todo.items():
        for seq in seqs:
            # the batch ending at the ack's own cutoff decides a seq it read; else one
            # any batch delivered is acknowledged, one they all left out is dropped
            seen = handed.get((p, seq))
            decided = None if seen is None else seen[0] and cutoff_ns not in seen[1]
            if decided:
                continue  # its batch delivered it
            try:
                meta = meta_of(p, seq)
            except SegmentMissingError:
                continue
            if meta is None:
                continue
            if decided is False or (decided is None and past(meta.max_ingestion_ns, cutoff_ns)):
                drops.setdefault(p, set()).add(seq)
                rows += meta.rows
    return drops, rows


def count_horizon_drops(
    metrics: Metrics,
    objects: ObjectStore,
    name: str,
    done: Callable[[], int],
    drops: Mapping[str, set[int]],
    rows: int,
    cutoff_ns: int | None,
) -> None:
    """The drops an acknowledgement just recorded: counted, logged and added to the
    subscription record (advisory: a record that cannot be updated never fails an
    acknowledgement; the ack log holds the outcomes). ``done``: the subscriber's done
    count in the ack log now."""
    n = sum(len(v) for v in drops.values())
    metrics.inc(SOURCE_HORIZON_DROPPED, n, subscriber=name)
    metrics.inc(SOURCE_HORIZON_DROPPED_ROWS, rows, subscriber=name)
    log.info(
        "quiver.source.horizon_dropped subscriber=%s segments=%d rows=%d cutoff_ns=%s %s",
        name,
        n,
        rows,
        cutoff_ns,
        {p: sorted(v) for p, v in drops.items()},
    )
    try:
        records.note_horizon_drops(objects, name, n, rows, progress=done())
    except (OSError, CorruptionError) as e:
        log.warning("quiver.subscriber.record_unwritten %s: %s", name, e)
