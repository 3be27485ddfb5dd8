"""Consuming a store as a subscriber: plan, read, acknowledge (ARCHITECTURE.md §18).

A :class:`Subscription` is one named consumer of a store. It turns the store's
finalized segments into :class:`Position` ranges, reads them
verified, and records every position it finishes as a durable acknowledgement, after
which one retention pass (:meth:`QuiverStore.run_retention`, the store's policy)
reclaims what every subscriber is done with. The Spark source is a translation of
its offsets to these calls; an embedded consumer uses them directly::

    with Subscription.open("/data/quiver", "forwarder") as sub:
        while (batch := sub.poll(Caps(max_segments=8))) is not None:
            for meta in batch.segments:
                for rb in sub.read(meta):
                    forward(rb)
            sub.ack(batch.end)          # durable; the segments may now be reclaimed

Everything it decides (start positions, admission under caps, the data-loss policy
for a missing sequence, acknowledgements) runs without a JVM. A reader that reads a
store without subscribing (a batch read) plans with :func:`plan_batch_read`; the tasks
of either are served by :func:`read_task` (:mod:`quiver_spark.subscription.read_tasks`).
"""

from __future__ import annotations

from ..segment import SegmentMeta
from ..subscribers import StartPosition
from .catchup import CatchUpOrder
from .consumer import Batch, Subscription
from .opening import open_store
from .planning import Caps
from .position import Position
from .read_tasks import Comparison, ReadTask, lost_report, plan_batch_read, read_task, read_tasks

__all__ = [
    "Batch",
    "Caps",
    "CatchUpOrder",
    "Comparison",
    "Position",
    "ReadTask",
    "SegmentMeta",
    "StartPosition",
    "Subscription",
    "lost_report",
    "open_store",
    "plan_batch_read",
    "read_task",
    "read_tasks",
]
"""What a consumer of a store uses: the subscription, the positions and caps it plans
with, and the read tasks of its batches and of a batch read. The parsing of options
and of offsets' JSON fields that the Spark source translates stays in the modules of
this package (``catchup``, ``horizon``, ``position``, ``opening``)."""
