"""Start cost: what a NEW process pays before it does anything, vs retained segments.

A store after weeks: many retained segments (a slow subscriber pins them all). Two
stores of the same shape (4 partitions, a slow subscriber that acknowledged nothing,
consumers ``c-<n>`` that acknowledged all but the newest segment of each partition,
one per run) are
built, one with ``--small`` retained segments and one with ``--large``, and measured
side by side, interleaved (A B A B ...), each run in a new process:

- ``quiver status PATH --json``;
- ``quiver gc PATH --json`` (nothing is deletable: the slow subscriber pins it all);
- a restarted consumer's first trigger: ``Subscription.open`` + ``poll`` + ``ack``
  (the ack runs the retention pass);
- a writer's first retention pass: ``QuiverStore.open(partition=...)`` +
  ``run_retention``.

Each store is opened once by a writer before the timings (the one-time upgrade that
writes each partition's MANIFEST from a listing, ARCHITECTURE.md §11.1). The requests
a new process makes to the root's objects for the manifest path are counted through
:class:`~quiver_spark.objects.CountingObjects` (a status run in this process).

Goal: each of the four within 1.5x at 20,000 vs 40 retained segments. A gc run's
file-layer calls (every open, read, stat and listing through
:class:`~quiver_spark.fs.FileIO`) are counted too, in this process: a plain gc reads no
kept segment's ``.meta`` (``quiver fsck`` and ``gc --full`` verify them).

Run: ``.venv/bin/python bench/bench_startup.py [--large 20000] [--reps 5]``
(writes bench/results/startup.json and prints markdown).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchdata import run_ended, run_started  # noqa: E402
from churn import churn, copy_objects  # noqa: E402

from quiver_spark import QuiverStore  # noqa: E402
from quiver_spark.fs import FileIO  # noqa: E402
from quiver_spark.objects import CountingObjects  # noqa: E402
from quiver_spark.segment import SegmentLocation  # noqa: E402
from quiver_spark.subscribers import Outcome, StartPosition, SubscriberRegistry  # noqa: E402

PARTITIONS = 4
PY = sys.executable
QUIVER = str(Path(sys.executable).with_name("quiver"))


class _NoSyncIO(FileIO):
    """Building only: the bench's fixture files need not survive a power loss."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def pid_of(i: int) -> str:
    return f"p-{i}"


def build_store(root: str, n_segments: int, consumers: int) -> dict[str, Any]:
    """``n_segments`` published segments over :data:`PARTITIONS` partitions, written
    the way bench_trigger does (one real segment per partition, the others copies of
    its bytes with their own ``.meta``), then one writer open per partition: the
    upgrade that writes its MANIFEST from a listing."""
    t0 = time.perf_counter()
    batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
    with QuiverStore.open(root, partition=None) as store:
        store.ensure_schema(batch.schema)
        url = store.segments_url
    loc = SegmentLocation(url, io=_NoSyncIO())
    per = [n_segments // PARTITIONS + (1 if i < n_segments % PARTITIONS else 0)
           for i in range(PARTITIONS)]  # fmt: skip
    now = time.time_ns()
    retained: dict[str, list[int]] = {}
    for i, k in enumerate(per):
        p = pid_of(i)
        first = loc.write(p, 1, [batch], min_ingestion_ns=now, max_ingestion_ns=now,
                          wal_ranges=[(1, 1)])  # fmt: skip
        retained[p] = list(range(1, k + 1))
        d = os.path.join(url, p)
        data = Path(d, f"{1:020d}.arrow").read_bytes()
        for s in range(2, k + 1):
            meta = dataclasses.replace(first, seq=s, wal_ranges=((s, s),),
                                       min_ingestion_ns=now + s, max_ingestion_ns=now + s)  # fmt: skip
            Path(d, f"{s:020d}.arrow").write_bytes(data)
            Path(d, f"{s:020d}.meta").write_bytes(meta.encode())
    with SubscriberRegistry.open(root) as reg:
        reg.register("slow", start=StartPosition.EARLIEST, retained=retained)
        for j in range(consumers):  # one per run: each run is a restart of the same trigger
            reg.register(f"c-{j}", start=StartPosition.EARLIEST, retained=retained)
            acked = {p: s[:-1] for p, s in retained.items() if s[:-1]}
            reg.record_many(f"c-{j}", acked, Outcome.ACK)
        reg.checkpoint()
    for i in range(PARTITIONS):  # the first writer open writes the partition's MANIFEST
        QuiverStore.open(root, partition=pid_of(i), background=False, create=False).close()
    return {"segments": n_segments, "build_s": time.perf_counter() - t0}


CONSUMER = """
import sys
from quiver_spark.subscription import Subscription
with Subscription.open(sys.argv[1], sys.argv[2]) as sub:
    batch = sub.poll()
    assert batch is not None and batch.segments, "the newest segment of each partition is new"
    sub.ack(batch.end)
"""

WRITER = """
import sys
from quiver_spark import QuiverStore
with QuiverStore.open(sys.argv[1], partition="p-0", background=False, create=False) as s:
    assert not s.run_retention().deleted
"""


def runs(root: str) -> dict[str, Callable[[], None]]:
    def proc(*argv: str) -> Callable[[], None]:
        return lambda: subprocess.run(argv, check=True, capture_output=True)

    consumers = iter(range(1 << 30))

    def consumer() -> None:
        proc(PY, "-c", CONSUMER, root, f"c-{next(consumers)}")()

    return {
        "status": proc(QUIVER, "status", root, "--json"),
        "gc": proc(QUIVER, "gc", root, "--json"),
        "consumer": consumer,
        "writer": proc(PY, "-c", WRITER, root),
    }


def manifest_requests(root: str, opts: dict[str, str] | None = None) -> dict[str, int]:
    """Requests to the root's objects of a ``quiver status`` run in this process."""
    from quiver_spark.cli.status import collect_status

    with QuiverStore.open(root, partition=None, create=False, background=False,
                          storage_options=opts) as store:  # fmt: skip
        counting = CountingObjects(store.manifests.objects)
        store.manifests.objects = counting
        collect_status(store)
        return dict(counting.counts)


class _CountingIO(FileIO):
    """Counts the file-layer calls (open, read, stat, listdir...) a run makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        self.calls += 1


def gc_file_calls(root: str) -> int:
    """File-layer calls of a ``quiver gc`` run in this process (a new handle)."""
    from quiver_spark.cli.gc import run_gc

    io = _CountingIO()
    with QuiverStore.open(root, partition=None, create=False, background=False, io=io) as store:
        run_gc(store, dry_run=False)
    return io.calls


# -- partition churn -------------------------------------------------------------------------
CHURN_CONSUMER = """
import json, sys
from quiver_spark.subscription import Subscription
with Subscription.open(sys.argv[1], "exporter", storage_options=json.loads(sys.argv[2])) as sub:
    assert sub.poll() is None, "the churned store is drained"
"""

CHURN_WRITER = """
import json, sys
from quiver_spark import QuiverStore
with QuiverStore.open(sys.argv[1], partition=sys.argv[3], background=False, create=False,
                      storage_options=json.loads(sys.argv[2])) as s:
    s.run_retention()
"""


def churn_runs(root: str, opts: dict[str, str] | None, first: str) -> dict[str, Callable[[], None]]:
    """The four start-ups on a churned store (its subscriber ``exporter`` drained it)."""
    js = json.dumps(opts)
    cli = [a for k, v in (opts or {}).items() for a in ("-S", f"{k}={v}")]

    def proc(*argv: str) -> Callable[[], None]:
        return lambda: subprocess.run(argv, check=True, capture_output=True)

    return {
        "status": proc(QUIVER, "status", root, "--json", *cli),
        "gc": proc(QUIVER, "gc", root, "--json", *cli),
        "consumer": proc(PY, "-c", CHURN_CONSUMER, root, js),
        "writer": proc(PY, "-c", CHURN_WRITER, root, js, first),
    }


def churn_rows(tmp: str, small: int, large: int, reps: int) -> dict[str, Any]:
    """The four start-ups on stores that ``small`` and ``large`` executor identities
    wrote (4 at a time, each once, exiting cleanly, drained by a subscriber): the
    host-named layout on a POSIX root (``<host>-<k>``: a partition per pod, what a
    POSIX root does) and the slot pool on S3 (moto; built on memory:// and put into
    the bucket), interleaved. Also the requests of a status run in this process."""
    from tests.moto_server import moto_server, s3_options

    out: dict[str, Any] = {"built": {}, "times_s": {}, "status_requests": {}}
    with moto_server("qstartup") as endpoint:
        opts = {k: str(v) for k, v in s3_options(endpoint).items()}
        stores: dict[str, tuple[str, dict[str, str] | None, str]] = {}
        for n in (small, large):
            root = os.path.join(tmp, f"churn-posix-{n}")
            out["built"][f"host-named (POSIX), {n}"] = churn(
                root, n, "host-named", Path(tmp, f"wal-posix-{n}")
            )
            stores[f"host-named (POSIX), {n}"] = (root, None, "pod-00000-0")
        for n in (small, large):
            mem, root = f"memory://startup/pool-{n}", f"s3://qstartup/pool-{n}"
            built = churn(mem, n, "pool", Path(tmp, f"wal-pool-{n}"))
            built["objects"] = copy_objects(mem, root, opts)
            out["built"][f"pool (S3), {n}"] = built
            stores[f"pool (S3), {n}"] = (root, opts, "w-0")
        work = {k: churn_runs(*v) for k, v in stores.items()}
        times: dict[str, dict[str, list[float]]] = {k: {} for k in stores}
        for rep in range(reps + 1):  # the first round warms the page cache
            for name in ("status", "gc", "consumer", "writer"):
                for k in stores:
                    t0 = time.perf_counter()
                    work[k][name]()
                    if rep:
                        times[k].setdefault(name, []).append(time.perf_counter() - t0)
        out["times_s"] = times
        out["status_requests"] = {k: manifest_requests(r, o) for k, (r, o, _) in stores.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=40)
    ap.add_argument("--large", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--churn-small", type=int, default=4, help="executor identities")
    ap.add_argument("--churn-large", type=int, default=1000, help="executor identities")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "startup.json"))
    args = ap.parse_args()
    run = run_started()
    with tempfile.TemporaryDirectory(prefix="quiver-startup-") as tmp:
        roots = {"small": os.path.join(tmp, "small"), "large": os.path.join(tmp, "large")}
        built = {k: build_store(r, args.small if k == "small" else args.large, args.reps + 1)
                 for k, r in roots.items()}  # fmt: skip
        times: dict[str, dict[str, list[float]]] = {k: {} for k in roots}
        work = {k: runs(r) for k, r in roots.items()}
        for rep in range(args.reps + 1):  # the first round warms the page cache
            for name in work["small"]:
                for k in roots:
                    t0 = time.perf_counter()
                    work[k][name]()
                    if rep:
                        times[k].setdefault(name, []).append(time.perf_counter() - t0)
        requests = {k: manifest_requests(r) for k, r in roots.items()}
        gc_calls = {k: gc_file_calls(r) for k, r in roots.items()}
        churned = churn_rows(tmp, args.churn_small, args.churn_large, args.reps)
    res = {"run": run_ended(run), "built": built, "times_s": times, "manifest_requests": requests,
           "gc_file_calls": gc_calls, "churn": churned}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"| what (new process) | {args.small} segments | {args.large} segments | ratio |")
    print("|---|---|---|---|")
    for name in work["small"]:
        a = statistics.median(times["small"][name])
        b = statistics.median(times["large"][name])
        print(f"| {name} | {a * 1e3:.0f} ms | {b * 1e3:.0f} ms | **{b / a:.2f}x** |")
    print(
        f"| manifest requests of a status run | {sum(requests['small'].values())} "
        f"{dict(requests['small'])} | {sum(requests['large'].values())} "
        f"{dict(requests['large'])} | - |"
    )
    print(f"| file-layer calls of a gc run | {gc_calls['small']} | {gc_calls['large']} | - |")
    print(f"\nPartition churn: {args.churn_small} vs {args.churn_large} executor identities "
          "ever seen (4 at a time, each wrote once, drained)\n")  # fmt: skip
    ct = churned["times_s"]
    print(f"| what (new process) | layout | {args.churn_small} identities | "
          f"{args.churn_large} identities | ratio |")  # fmt: skip
    print("|---|---|---|---|---|")
    for layout in ("host-named (POSIX)", "pool (S3)"):
        a_k, b_k = f"{layout}, {args.churn_small}", f"{layout}, {args.churn_large}"
        parts = (churned["built"][a_k]["partitions"], churned["built"][b_k]["partitions"])
        for name in ct[a_k]:
            a, b = statistics.median(ct[a_k][name]), statistics.median(ct[b_k][name])
            print(f"| {name} | {layout}, {parts[0]} / {parts[1]} partitions | {a * 1e3:.0f} ms "
                  f"| {b * 1e3:.0f} ms | **{b / a:.2f}x** |")  # fmt: skip
        req = churned["status_requests"]
        print(f"| manifest requests of a status run | {layout} | {sum(req[a_k].values())} | "
              f"{sum(req[b_k].values())} | - |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
