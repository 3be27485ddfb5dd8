"""Planning cost of an idle partition whose whole history was deleted.

An executor slot no longer written: every segment of partition ``p-1`` was
acknowledged and deleted (``--deleted`` seqs recorded deleted in the ack log), while
``p-0`` is live. After a consumer's full listing its view of ``p-1`` holds no seq;
each later trigger probes ``p-1`` for new segments. Prints the median wall time of
:meth:`Subscription.next_batch_end` per trigger.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_idle_partition.py [--deleted 1000000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from quiver_spark import QuiverStore
from quiver_spark.position import Position
from quiver_spark.subscription import Subscription
from tests.stores import HAND_SEALED, int_segments


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deleted", type=int, default=1_000_000)
    ap.add_argument("--triggers", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        int_segments(root, [(0, 1)], partition="p-0")
        int_segments(root, [(1, 1)], partition="p-1")
        with QuiverStore.open(root, HAND_SEALED, partition=None, background=False) as s:
            s.subscribers.register("r")
            s.subscribers.condemn({"p-1": range(1, args.deleted + 1)})  # one run record
            s.segment_location.delete("p-1", [1])
        with Subscription.open(root, "r") as sub:
            first = sub.next_batch_end(Position({"p-0": 0, "p-1": args.deleted}))  # full listing
            times = []
            for _ in range(args.triggers):
                t0 = time.perf_counter()
                sub.next_batch_end(first)
                times.append(time.perf_counter() - t0)
    print(
        f"deleted={args.deleted} triggers={args.triggers} "
        f"plan median={statistics.median(times) * 1000:.2f} ms max={max(times) * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
