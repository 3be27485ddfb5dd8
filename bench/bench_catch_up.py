"""Catch-up after an outage: oldest first vs newest first, side by side in one run.

A producer writes a segment every ``--interval`` seconds (``--rows`` rows, each holding
its id and the wall time it was written) for the whole run. Two subscribers of the
same store, ``oldest`` and ``newest`` (``Subscription(order=...)``), are stopped for
``--outage`` seconds, so each has the same backlog; then both resume, one trigger of
each every ``--trigger`` seconds, alternating (same data, same machine, same load),
each admitting at most ``--max-segments`` segments per trigger (below what a trigger
could read, so the backlog takes a while to drain while new data keeps coming).

Measured per order:

- **latency of fresh rows**: for rows written after the resume, delivery time minus
  write time (p50, p99), while the backlog drains and overall;
- **drain time**: from the resume until every row written before it is delivered (newest
  first serves new data first, so its old rows are done later by design);
- **catch-up time**: from the resume until the subscriber has no lag left (every row
  written before its latest trigger delivered): the backlog and what accrued while it
  drained, the work both orders must do;
- **throughput**: rows delivered per second from the resume until both caught up;
- **audit**: every row written is delivered exactly once (a final drain after the
  producer stops).

Goal (newest): fresh rows delivered within one trigger + 1 s at p50 while the backlog
drains; catch-up time <= 1.2x oldest's; both audits clean.

Run: ``.venv/bin/python bench/bench_catch_up.py [--outage 30] [--interval 0.2]``
(writes bench/results/catch_up.json and prints it). The engine's embedded
subscription is measured, no JVM: a Spark query's triggers add Spark's own per-batch
overhead on top, the same for both orders.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import run_ended, run_started

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscription import Caps, Subscription

RESULTS = Path(__file__).resolve().parent / "results" / "catch_up.json"
CONFIG = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
ORDERS = ("oldest", "newest")


class Producer(threading.Thread):
    """Appends and finalizes one segment every ``interval`` seconds until stopped."""

    def __init__(self, root: str, interval: float, rows: int) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.rows = root, interval, rows
        self.next_id = 0
        self.stop_event = threading.Event()
        self.written_at: list[tuple[float, int]] = []  # (wall time, first id) per segment
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with QuiverStore.open(self.root, CONFIG, partition="p-0", background=False) as s:
                due = time.monotonic()
                while not self.stop_event.is_set():
                    ids = list(range(self.next_id, self.next_id + self.rows))
                    now_ns = time.time_ns()
                    s.append(pa.record_batch({
                        "id": pa.array(ids, pa.int64()),
                        "written_ns": pa.array([now_ns] * len(ids), pa.int64()),
                        "payload": pa.array(["x" * 40] * len(ids)),
                    }))  # fmt: skip
                    s.finalize()
                    self.written_at.append((time.time(), self.next_id))
                    self.next_id += self.rows
                    due += self.interval
                    self.stop_event.wait(max(0.0, due - time.monotonic()))
        except BaseException as e:  # reported by the main thread
            self.error = e


class Consumer:
    """One subscriber: a trigger polls one batch, reads it (delivery), acknowledges."""

    def __init__(self, root: str, order: str, caps: Caps) -> None:
        self.sub = Subscription.open(root, order, order=order)
        self.caps = caps
        self.delivered: Counter[int] = Counter()
        self.seen: list[tuple[int, float, float]] = []  # (id, written, delivered) wall s
        self.lowest_undelivered = 0

    def advance(self) -> None:
        while self.delivered[self.lowest_undelivered]:
            self.lowest_undelivered += 1

    def trigger(self) -> int:
        batch = self.sub.poll(self.caps)
        if batch is None:
            return 0
        n = 0
        for meta in batch.segments:
            for b in self.sub.read(meta):
                now = time.time()
                ids = b.column("id").to_pylist()
                written = b.column("written_ns").to_pylist()
                self.delivered.update(ids)
                self.seen += [(i, w / 1e9, now) for i, w in zip(ids, written, strict=True)]
                n += len(ids)
        self.sub.ack(batch.end)
        return n

    def close(self) -> None:
        self.sub.close()


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="qcatchup-bench-")
    try:
        QuiverStore.open(root, CONFIG, partition="p-0", background=False).close()
        for order in ORDERS:  # registered before the first row: the outage begins
            c = Consumer(root, order, Caps(max_segments=args.max_segments))
            c.sub.start("earliest")
            c.close()
        producer = Producer(root, args.interval, args.rows)
        producer.start()
        time.sleep(args.outage)
        consumers = {o: Consumer(root, o, Caps(max_segments=args.max_segments)) for o in ORDERS}
        resume = time.time()
        first_fresh = producer.next_id  # rows from this id on were written after the resume
        drained: dict[str, float | None] = dict.fromkeys(ORDERS)
        caught_up: dict[str, float | None] = dict.fromkeys(ORDERS)
        end_at: float | None = None
        while end_at is None or time.time() < end_at:
            t0 = time.monotonic()
            for order, c in consumers.items():
                written = producer.next_id  # every row below was written before this trigger
                c.trigger()
                c.advance()
                if drained[order] is None and c.lowest_undelivered >= first_fresh:
                    drained[order] = time.time() - resume  # the rows of the outage
                if caught_up[order] is None and c.lowest_undelivered >= written:
                    caught_up[order] = time.time() - resume  # no lag left but this trigger's
            if end_at is None and all(v is not None for v in caught_up.values()):
                end_at = time.time() + args.tail
            if producer.error:
                raise producer.error
            time.sleep(max(0.0, args.trigger - (time.monotonic() - t0)))
            if time.time() - resume > args.max_run:
                break
        producer.stop_event.set()
        producer.join(30)
        last_id = producer.next_id
        for c in consumers.values():  # the final drain, for the audit
            while c.trigger():
                pass
        out: dict[str, Any] = {}
        both = [v for v in caught_up.values() if v is not None]
        span = max(both) if len(both) == len(ORDERS) else None
        for order, c in consumers.items():
            d = drained[order]
            fresh = [got - w for i, w, got in c.seen if i >= first_fresh]
            during = [
                got - w
                for i, w, got in c.seen
                if i >= first_fresh and d is not None and w <= resume + d
            ]
            by_span = sum(1 for _, _, got in c.seen if span is not None and got <= resume + span)
            out[order] = {
                "backlog_rows": first_fresh,
                "drain_s": d,
                "catch_up_s": caught_up[order],
                "fresh_latency_s": {
                    "p50": pct(fresh, 0.5),
                    "p99": pct(fresh, 0.99),
                    "rows": len(fresh),
                },
                "fresh_latency_while_draining_s": {
                    "p50": pct(during, 0.5),
                    "p99": pct(during, 0.99),
                    "rows": len(during),
                },
                "throughput_rows_per_s": by_span / span if span else None,
                "audit": {
                    "rows_written": last_id,
                    "doubled": sum(1 for n in c.delivered.values() if n > 1),
                    "missing": sum(1 for i in range(last_id) if not c.delivered[i]),
                },
            }
            c.close()
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--outage", type=float, default=30.0, help="seconds both subscribers are down")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between segments")
    ap.add_argument("--rows", type=int, default=1000, help="rows per segment")
    ap.add_argument("--trigger", type=float, default=0.5, help="seconds per trigger")
    ap.add_argument("--max-segments", type=int, default=4, help="segments per trigger")
    ap.add_argument("--tail", type=float, default=3.0, help="seconds run after both caught up")
    ap.add_argument("--max-run", type=float, default=600.0, help="give up after this long")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    record = run_started()
    results = run(args)
    goal_p50 = args.trigger + 1.0
    new, old = results["newest"], results["oldest"]
    goals = {
        "fresh_p50_within_trigger_plus_1s": new["fresh_latency_while_draining_s"]["p50"]
        <= goal_p50,
        "catch_up_at_most_1_2x_oldest": (
            new["catch_up_s"] is not None
            and old["catch_up_s"] is not None
            and new["catch_up_s"] <= 1.2 * old["catch_up_s"]
        ),
        "audits_clean": all(
            r["audit"]["doubled"] == 0 and r["audit"]["missing"] == 0 for r in results.values()
        ),
    }
    data = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
        "goals": goals,
        "run": run_ended(record),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(json.dumps(data, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
