"""What a long-lived subscriber with nothing new pays, vs the partitions of a store.

An executor slot no longer written leaves a partition every reader looks at; a store
on an object root keeps about as many partitions as wrote at once (the slot pool,
ARCHITECTURE.md §8.2), a POSIX root one per host and core. A subscriber that read
and acknowledged everything polls again and again: what does each idle poll
(``Subscription.poll``) and each idle ``latestOffset`` of the Spark source (``ack`` of
its start + ``next_batch_end``, in one call) cost, in requests to the root's objects
(counted as a bill counts them, :class:`~quiver_spark.objects.CountingObjects`) and
in seconds, at ``--partitions`` (default 4 and 1,000)?

Two shapes per count: *live* (a subscriber that read nothing keeps every segment)
and *drained* (every segment acknowledged and deleted). Roots: ``memory://`` (the
requests; its seconds are the CPU's), and with ``--s3 N,M`` an S3 server on loopback
(``moto_server``), whose seconds are a network's.

Run: ``.venv/bin/python bench/bench_idle_partition.py [--partitions 4,1000]
[--s3 4,300] [--out bench/results/idle_poll.json]`` (prints markdown).

``--deleted N`` measures instead the planning of a POSIX partition whose history of
N seqs was deleted (the median wall time of ``next_batch_end``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchdata import run_ended, run_started  # noqa: E402

import quiver_spark.store as store_module  # noqa: E402
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig  # noqa: E402
from quiver_spark.objects import CountingObjects, ObjectStore  # noqa: E402
from quiver_spark.subscription import Subscription  # noqa: E402
from quiver_spark.subscription.position import Position  # noqa: E402

TRIGGERS = 5


def deleted_history(deleted: int, triggers: int) -> None:
    from tests.stores import HAND_SEALED, int_segments

    with tempfile.TemporaryDirectory() as root:
        int_segments(root, [(0, 1)], partition="p-0")
        int_segments(root, [(1, 1)], partition="p-1")
        with QuiverStore.open(root, HAND_SEALED, partition=None, background=False) as s:
            s.subscribers.register("r")
            s.subscribers.condemn({"p-1": range(1, deleted + 1)})  # one run record
            s.segment_location.delete("p-1", [1])
        with Subscription.open(root, "r") as sub:
            first = sub.next_batch_end(Position({"p-0": 0, "p-1": deleted}))  # full listing
            times = []
            for _ in range(triggers):
                t0 = time.perf_counter()
                sub.next_batch_end(first)
                times.append(time.perf_counter() - t0)
    print(
        f"deleted={deleted} triggers={triggers} "
        f"plan median={statistics.median(times) * 1000:.2f} ms max={max(times) * 1000:.2f} ms"
    )


@contextmanager
def counting() -> Iterator[list[CountingObjects]]:
    made: list[CountingObjects] = []
    real = store_module.open_objects

    def wrap(*args: Any, **kwargs: Any) -> ObjectStore:
        c = CountingObjects(real(*args, **kwargs))
        made.append(c)
        return c

    store_module.open_objects = wrap  # type: ignore[assignment]
    try:
        yield made
    finally:
        store_module.open_objects = real  # type: ignore[assignment]


def build(url: str, config: StoreConfig, opts: dict[str, str] | None, n: int, live: bool) -> None:
    batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
    for k in range(n):
        with QuiverStore.open(
            url, config, partition=f"w-{k}", background=False, storage_options=opts
        ) as w:
            w.append(batch)
            w.flush()
            w.finalize()
    if live:
        with Subscription.open(url, "slow", config=config, storage_options=opts) as slow:
            slow.start("earliest")


def measure(url: str, config: StoreConfig, opts: dict[str, str] | None) -> dict[str, Any]:
    with counting() as made:
        sub = Subscription.open(url, "idle", config=config, storage_options=opts)
        with sub:
            sub.start("earliest")
            while (got := sub.poll()) is not None:
                sub.ack(got.end)
            sub._state.last_retention = float("inf")  # a rate-limited pass is not idle cost
            (c,) = made
            out: dict[str, Any] = {"poll": {"requests": [], "s": []},
                                   "latest_offset": {"requests": [], "s": []}}  # fmt: skip
            for _ in range(TRIGGERS):
                c.counts.clear()
                t0 = time.perf_counter()
                assert sub.poll() is None
                out["poll"]["s"].append(time.perf_counter() - t0)
                out["poll"]["requests"].append(dict(c.counts))
                start = sub.acked()
                c.counts.clear()
                t0 = time.perf_counter()
                with sub.one_call():  # the Spark source's latestOffset
                    sub.ack(start)
                    assert not sub.next_batch_end(start).is_after(start)
                out["latest_offset"]["s"].append(time.perf_counter() - t0)
                out["latest_offset"]["requests"].append(dict(c.counts))
    return out


def one_root(kind: str, counts: list[int], opts_for: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for n in counts:
        for live in (True, False):
            shape = "live" if live else "drained"
            with tempfile.TemporaryDirectory(prefix="quiver-idle-") as tmp:
                config = StoreConfig(
                    wal=WalConfig(path=f"{tmp}/wal", flush_interval_s=0),
                    segment=SegmentConfig(max_open_duration_s=3600),
                )
                url, opts = opts_for(f"idle-{n}-{shape}-{uuid.uuid4().hex[:6]}")
                t0 = time.perf_counter()
                build(url, config, opts, n, live)
                built = time.perf_counter() - t0
                got = measure(url, config, opts)
            got["build_s"] = built
            res.setdefault(str(n), {})[shape] = got
            p = got["poll"]
            print(f"{kind} partitions={n} {shape}: poll {sum(p['requests'][-1].values())} "
                  f"requests {statistics.median(p['s']) * 1e3:.1f} ms", flush=True)  # fmt: skip
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="4,1000")
    ap.add_argument("--s3", default="4,300", help="partition counts to measure on moto too (\"\": none)")
    ap.add_argument("--deleted", type=int, default=0)
    ap.add_argument("--triggers", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "idle_poll.json"))
    args = ap.parse_args()
    if args.deleted:
        deleted_history(args.deleted, args.triggers)
        return 0
    run = run_started()
    counts = [int(x) for x in args.partitions.split(",") if x]
    roots = {"memory": one_root("memory", counts, lambda name: (f"memory://{name}/s", None))}
    if args.s3:
        from bench_object_requests import BUCKET, s3_options

        from tests.moto_server import moto_server

        with moto_server(BUCKET) as endpoint:
            opts = s3_options(endpoint)
            roots["s3"] = one_root(
                "s3",
                [int(x) for x in args.s3.split(",")],
                lambda name: (f"s3://{BUCKET}/{name}", opts),
            )
    res = {"run": run_ended(run), "triggers": TRIGGERS, "roots": roots}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print("| root | partitions | shape | idle poll | idle latestOffset |")
    print("|---|---|---|---|---|")
    for kind, by_n in roots.items():
        for n, shapes in by_n.items():
            for shape, got in shapes.items():
                cells = []
                for what in ("poll", "latest_offset"):
                    r = sum(got[what]["requests"][-1].values())
                    cells.append(f"{r} requests, {statistics.median(got[what]['s']) * 1e3:.1f} ms")
                print(f"| {kind} | {n} | {shape} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
