"""P10: per-trigger cost of the source, a retention pass and the CLI vs retained segments.

A user's store after weeks: many retained segments (a slow subscriber pins them),
many partitions and subscribers. Two stores of the same shape are built, one with
``--small`` retained segments and one with ``--large`` (64 partitions, 50
subscribers: one that acknowledged nothing, 48 at different points, and the
measured one), and measured side by side, interleaved (A B A B ...):

- **trigger**: what the source's planning process does every micro-batch, called on
  :class:`~quiver_spark.spark.source.QuiverStreamReader` directly (the methods Spark
  calls; no JVM needed): a new segment is published in one partition (untimed, as a
  writer would), then ``latestOffset`` + ``partitions`` + ``commit`` (the ack and
  the retention pass it runs) are timed. Filesystem requests are counted per trigger
  (calls of the store's file layer, and directory entries listed).
- **retention**: a process's first :meth:`QuiverStore.run_retention` pass (a full
  survey) and the pass after it (incremental); nothing is deletable: the slow
  subscriber pins everything, as in a steady state with a lagging consumer.
- **CLI**: ``quiver status`` and ``quiver gc`` as a user runs them (subprocess wall time).
- **S3**: the same trigger with segments on S3 (moto's S3 server on 127.0.0.1, as in
  ``integration/test_s3_tier.py``), HTTP requests counted at the server, for
  ``--s3-small`` vs ``--s3-large`` retained segments.
- **profile**: cProfile of one trigger on the large local store: the calls that
  scale with retained segments.

Goal: trigger <= 1.2x at 100,000 vs 100 retained segments; requests per trigger
independent of retained segments (ARCHITECTURE.md §15.1, "What a pass reads").

Run: ``.venv/bin/python bench/bench_trigger.py [--large 100000] [--triggers 5]``
(writes bench/results/trigger.json and prints markdown). A quick run:
``--large 5000 --s3-large 300 --triggers 3``.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import dataclasses
import io
import json
import logging
import os
import pstats
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import run_ended, run_started
from churn import churn, copy_objects

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from quiver_spark import QuiverStore, StoreConfig  # noqa: E402
from quiver_spark.config import SegmentConfig  # noqa: E402
from quiver_spark.fs import FileIO  # noqa: E402
from quiver_spark.objects import ObjectStore, open_objects  # noqa: E402
from quiver_spark.segment import SegmentLocation  # noqa: E402
from quiver_spark.subscribers import Outcome, StartPosition, SubscriberRegistry  # noqa: E402
from quiver_spark.urls import is_local_url  # noqa: E402

PARTITIONS = 64
SUBSCRIBERS = 50  # the pinning one, 48 at various points, and the measured one
QUIVER = str(Path(sys.executable).with_name("quiver"))


def tiny_batch(n: int = 10) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"event-{i:012d}" for i in range(n)]),
        }
    )


def pid_of(i: int) -> str:
    return f"p-{i:02d}"


# -- building a store ------------------------------------------------------------------------
class _NoSyncIO(FileIO):
    """Building only: the bench's fixture files need not survive a power loss."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def build_store(
    root: str, n_segments: int, segments_url: str | None = None, bucket: ObjectStore | None = None
) -> dict[str, Any]:
    """A store with ``n_segments`` published segments over 64 partitions and 50 subscribers.

    One real segment is written per partition through :class:`SegmentLocation`; the
    others are copies of its bytes with their own ``.meta`` (same checksum: same bytes),
    which is what a writer's finalize publishes, minus the fsyncs (``bucket``: the
    segments location's objects when ``segments_url`` is in a bucket).
    """
    t0 = time.perf_counter()
    config = StoreConfig(segment=SegmentConfig(path=segments_url))
    batch = tiny_batch()
    with QuiverStore.open(root, config, partition=None) as store:
        store.ensure_schema(batch.schema)
        url = store.segments_url
    loc = SegmentLocation(url, io=_NoSyncIO())
    per = [n_segments // PARTITIONS + (1 if i < n_segments % PARTITIONS else 0)
           for i in range(PARTITIONS)]  # fmt: skip
    now = time.time_ns()
    retained: dict[str, list[int]] = {}
    for i, k in enumerate(per):
        p = pid_of(i)
        if k == 0:
            continue
        first = loc.write(p, 1, [batch], min_ingestion_ns=now, max_ingestion_ns=now,
                          wal_ranges=[(1, 1)])  # fmt: skip
        retained[p] = list(range(1, k + 1))
        arrow_name = f"{1:020d}.arrow"
        if is_local_url(url):
            d = os.path.join(url, p)
            data = Path(d, arrow_name).read_bytes()
            for s in range(2, k + 1):
                meta = dataclasses.replace(first, seq=s, wal_ranges=((s, s),),
                                           min_ingestion_ns=now + s, max_ingestion_ns=now + s)  # fmt: skip
                Path(d, f"{s:020d}.arrow").write_bytes(data)
                Path(d, f"{s:020d}.meta").write_bytes(meta.encode())
        else:
            assert bucket is not None
            got = bucket.get(f"{p}/{arrow_name}")
            assert got is not None
            objs = {}
            for s in range(2, k + 1):
                meta = dataclasses.replace(first, seq=s, wal_ranges=((s, s),),
                                           min_ingestion_ns=now + s, max_ingestion_ns=now + s)  # fmt: skip
                objs[f"{p}/{s:020d}.arrow"] = got.data
                objs[f"{p}/{s:020d}.meta"] = meta.encode()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda kv: bucket.put(*kv), objs.items()))
    with SubscriberRegistry.open(root) as reg:
        reg.register("slow", start=StartPosition.EARLIEST, retained=retained)  # pins all
        for j in range(SUBSCRIBERS - 2):
            name = f"sub-{j:02d}"
            reg.register(name, start=StartPosition.EARLIEST, retained=retained)
            acks = {p: seqs[: len(seqs) * j // (SUBSCRIBERS - 2)] for p, seqs in retained.items()}
            acks = {p: v for p, v in acks.items() if v}
            if acks:
                reg.record_many(name, acks, Outcome.ACK)
    sub_dir = Path(root, "subscribers")

    def ack_files() -> dict[str, int]:
        return {f.name: f.stat().st_size for f in sorted(sub_dir.rglob("*")) if f.is_file()}

    before = ack_files()
    with SubscriberRegistry.open(root) as reg:
        reg.checkpoint()  # what a long-lived store holds: a checkpoint and a short log
    return {
        "segments": n_segments,
        "partitions": PARTITIONS,
        "subscribers": SUBSCRIBERS,
        "build_s": time.perf_counter() - t0,
        "ack_files": before,
        "ack_files_checkpointed": ack_files(),
    }


# -- counting requests -------------------------------------------------------------------------
class Counter:
    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.shapes: collections.Counter[str] = collections.Counter()  # S3: request kinds
        self.entries = 0

    def reset(self) -> None:
        self.calls.clear()
        self.shapes.clear()
        self.entries = 0

    @property
    def total(self) -> int:
        return sum(self.calls.values())


LOCAL = Counter()
_FILEIO_OPS = ("open_create", "open_append", "read_file", "rename", "link", "unlink", "mkdir",
               "fsync", "fsync_dir", "fdatasync", "truncate", "chmod", "listdir", "exists",
               "size", "atomic_write", "create_exclusive", "durable_unlink")  # fmt: skip


def count_local_requests() -> None:
    """Count the store's filesystem requests: every FileIO operation (patched in place)."""

    def wrap(name: str, fn: Callable[..., Any], static: bool) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            LOCAL.calls[name] += 1
            out = fn(*args, **kwargs)
            if name == "listdir":
                LOCAL.entries += len(out)
            return out

        return staticmethod(counted) if static else counted

    for name in _FILEIO_OPS:
        raw = FileIO.__dict__.get(name)
        if raw is None:
            continue
        static = isinstance(raw, staticmethod)
        fn = raw.__func__ if static else raw
        setattr(FileIO, name, wrap(name, fn, static))
    real_map = pa.memory_map

    def memory_map(*a: Any, **k: Any) -> Any:
        LOCAL.calls["memory_map"] += 1
        return real_map(*a, **k)

    pa.memory_map = memory_map


S3 = Counter()


@contextmanager
def moto_s3(tmp: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 with every HTTP request counted (method, list or object)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    app = server._server.app  # type: ignore[union-attr]

    def counting(environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        listing = method == "GET" and "list-type" in environ.get("QUERY_STRING", "")
        kind = "LIST" if listing else method
        S3.calls[kind] += 1
        what = environ.get("PATH_INFO", "") + ("?" + environ["QUERY_STRING"] if listing else "")
        S3.shapes[f"{kind} {re.sub(r'[0-9]{6,}', 'N', re.sub(r'p-[0-9]+', 'p-K', what))}"] += 1
        return app(environ, start_response)

    server._server.app = counting  # type: ignore[union-attr]
    env = {
        "AWS_ACCESS_KEY_ID": "quiver-bench", "AWS_SECRET_ACCESS_KEY": "quiver-bench",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
    }  # fmt: skip
    os.environ.update(env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# -- the trigger --------------------------------------------------------------------------------
class Trigger:
    """One source's planning process: the calls Spark makes every micro-batch."""

    def __init__(self, root: str, publish_url: str, counter: Counter) -> None:
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        from quiver_spark.spark.source import QuiverStreamReader

        schema = StructType([StructField("id", LongType()), StructField("s", StringType())])
        self.reader = QuiverStreamReader(
            {"path": root, "subscriber": "trigger", "startingPosition": "latest"}, schema
        )
        self.start = self.reader.initialOffset()
        self.publisher = SegmentLocation(publish_url)
        self.counter = counter
        self.batch = tiny_batch()
        self.n = 0

    def publish(self) -> None:
        """A writer's new segment in the next partition (round robin); not timed."""
        p = pid_of(self.n % PARTITIONS)
        self.n += 1
        seq = self.publisher.published_seqs(p)
        s = (seq[-1] if seq else 0) + 1
        now = time.time_ns()
        self.publisher.write(p, s, [self.batch], min_ingestion_ns=now, max_ingestion_ns=now,
                             wal_ranges=[(s, s)])  # fmt: skip

    def once(self) -> dict[str, Any]:
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        self.publish()
        self.counter.reset()
        r = self.reader
        t0 = time.perf_counter()
        end = r.latestOffset(self.start, ReadAllAvailable())
        t1 = time.perf_counter()
        parts = r.partitions(self.start, end)
        t2 = time.perf_counter()
        r.commit(end)
        t3 = time.perf_counter()
        assert len(parts) == 1, f"expected the one new segment, planned {len(parts)}"
        self.start = end
        return {
            "total_ms": (t3 - t0) * 1e3, "latestOffset_ms": (t1 - t0) * 1e3,
            "partitions_ms": (t2 - t1) * 1e3, "commit_ms": (t3 - t2) * 1e3,
            "requests": self.counter.total, "by_kind": dict(self.counter.calls),
            "shapes": dict(self.counter.shapes),
            "entries_listed": self.counter.entries,
        }  # fmt: skip

    def close(self) -> None:
        self.reader.stop()


class ChurnTrigger(Trigger):
    """The same trigger on a store that executor pods churned through
    (:func:`churn.churn`): the new segment is a writer's of the store's first partition
    (``w-0`` of the slot pool, or the first pod's ``<host>-0``), appended, flushed and
    finalized; not timed."""

    def __init__(self, root: str, partition: str, wal: Path, counter: Counter) -> None:
        from pyspark.sql.types import LongType, StructField, StructType

        from quiver_spark.config import WalConfig
        from quiver_spark.spark.source import QuiverStreamReader

        schema = StructType([StructField("id", LongType())])
        self.reader = QuiverStreamReader(
            {"path": root, "subscriber": "trigger", "startingPosition": "latest"}, schema
        )
        self.start = self.reader.initialOffset()
        config = StoreConfig(wal=WalConfig(path=str(wal)))
        self.writer = QuiverStore.open(root, config, partition=partition, background=False,
                                       create=False)  # fmt: skip
        self.counter = counter
        self.batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
        self.n = 0

    def publish(self) -> None:
        self.writer.append(self.batch)
        self.writer.flush()
        self.writer.finalize()

    def close(self) -> None:
        super().close()
        self.writer.close()


def churn_triggers(work: Path, small: int, large: int, triggers: int) -> dict[str, Any]:
    """P10's partition-churn row: the trigger on S3 roots (moto; every HTTP request
    counted) that ``small`` and ``large`` executor identities wrote (4 at a time, each
    once, exiting cleanly, drained by a subscriber), in the slot pool and host-named (a
    partition per pod, before the pool); each built on memory:// and put into the
    bucket. Must run inside :func:`moto_s3`."""
    out: dict[str, Any] = {"built": {}}
    trig: dict[str, ChurnTrigger] = {}
    for layout in ("pool", "host-named"):
        for n in (small, large):
            key = f"{layout}, {n}"
            mem, root = f"memory://trigger/{layout}-{n}", f"s3://quiver-bench/churn-{layout}-{n}"
            built = churn(mem, n, layout, work / f"churn-{layout}-{n}")
            built["objects"] = copy_objects(mem, root)
            out["built"][key] = built
            first = "w-0" if layout == "pool" else "pod-00000-0"
            trig[key] = ChurnTrigger(root, first, work / f"churn-wal-{layout}-{n}", S3)
    try:
        out["trigger"] = interleaved({k: t.once for k, t in trig.items()}, triggers)
    finally:
        for t in trig.values():
            t.close()
    return out


def interleaved(makers: dict[str, Callable[[], dict[str, Any]]], reps: int, warm: int = 1) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in makers}
    for i in range(warm + reps):
        for k, fn in makers.items():
            r = fn()
            if i >= warm:
                out[k].append(r)
    return out


def med(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def spread(rows: list[dict[str, Any]], key: str) -> str:
    v = [r[key] for r in rows]
    return f"{min(v):.0f}-{max(v):.0f}"


def timed(fn: Callable[[], Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    fn()
    return {"ms": (time.perf_counter() - t0) * 1e3}


def cli(*args: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run([QUIVER, *args], check=True, capture_output=True)

    return run


def retention_pass(root: str) -> Callable[[], dict[str, Any]]:
    """A process's first retention pass (a full survey: every .meta read once) and the
    pass after it (incremental: what a long-lived source or writer runs)."""

    def run() -> dict[str, Any]:
        with QuiverStore.open(root, partition=None, create=False, background=False) as store:
            out: dict[str, Any] = {}
            for name in ("first", "later"):
                LOCAL.reset()
                t0 = time.perf_counter()
                result = store.run_retention()
                out[f"{name}_ms"] = (time.perf_counter() - t0) * 1e3
                out[f"{name}_requests"] = LOCAL.total
                assert not result.deleted, "nothing is deletable: the slow subscriber pins it all"
            return out

    return run


def profile_trigger(trig: Trigger, top: int) -> list[dict[str, Any]]:
    """cProfile of one trigger: quiver_spark functions by cumulative time, with call counts."""
    prof = cProfile.Profile()
    prof.enable()
    trig.once()
    prof.disable()
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if "quiver_spark" not in file and fn not in ("read_bytes", "listdir", "decode_frame"):
            continue
        short = file.split("quiver_spark/")[-1] if "quiver_spark" in file else os.path.basename(file)
        rows.append({"function": f"{short}:{line}({fn})", "calls": nc, "cum_ms": ct * 1e3,
                     "self_ms": tt * 1e3})  # fmt: skip
    rows.sort(key=lambda r: -r["cum_ms"])
    return rows[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=100, help="retained segments, small store")
    ap.add_argument("--large", type=int, default=100_000, help="retained segments, large store")
    ap.add_argument("--s3-small", type=int, default=100)
    ap.add_argument("--s3-large", type=int, default=2_000, help="S3: every request is HTTP")
    ap.add_argument("--triggers", type=int, default=5, help="timed triggers per store")
    ap.add_argument("--reps", type=int, default=3, help="retention/CLI repetitions")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--churn-small", type=int, default=4, help="executor identities (S3)")
    ap.add_argument("--churn-large", type=int, default=1000, help="executor identities (S3)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "trigger.json"))
    args = ap.parse_args()
    run = run_started()
    logging.basicConfig(level=logging.ERROR)
    count_local_requests()
    work = Path(tempfile.mkdtemp(prefix="quiver-bench-trigger-"))
    res: dict[str, Any] = {
        "command": "bench/bench_trigger.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_start": os.getloadavg()[0]},
    }
    try:
        roots = {"small": str(work / "small"), "large": str(work / "large")}
        res["stores"] = {
            k: build_store(roots[k], n) for k, n in (("small", args.small), ("large", args.large))
        }
        triggers = {k: Trigger(roots[k], os.path.join(roots[k], "segments"), LOCAL)
                    for k in roots}  # fmt: skip
        res["trigger"] = interleaved({k: t.once for k, t in triggers.items()}, args.triggers)
        res["retention"] = interleaved({k: retention_pass(roots[k]) for k in roots}, args.reps)
        res["status"] = interleaved({k: lambda k=k: timed(cli("status", roots[k])) for k in roots},
                                    args.reps)  # fmt: skip
        res["gc"] = interleaved({k: lambda k=k: timed(cli("gc", roots[k])) for k in roots},
                                args.reps)  # fmt: skip
        res["profile_large"] = profile_trigger(triggers["large"], 25)
        for t in triggers.values():
            t.close()
        if not args.no_s3:
            import boto3

            with moto_s3(work):
                boto3.client("s3").create_bucket(Bucket="quiver-bench")
                s3 = {}
                for k, n in (("small", args.s3_small), ("large", args.s3_large)):
                    root = str(work / f"s3-{k}")
                    url = f"s3://quiver-bench/{k}"
                    res.setdefault("s3_stores", {})[k] = build_store(
                        root, n, url, open_objects(url)
                    )
                    s3[k] = Trigger(root, url, S3)
                res["s3_trigger"] = interleaved({k: t.once for k, t in s3.items()}, args.triggers)
                for t in s3.values():
                    t.close()
                res["churn"] = churn_triggers(work, args.churn_small, args.churn_large,
                                              args.triggers)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    res["run"] = run_ended(run)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print_report(res, args)
    return 0


def print_report(res: dict[str, Any], args: argparse.Namespace) -> None:
    st = res["stores"]
    t = res["trigger"]
    m = res["machine"]
    print(f"P10: trigger cost vs retained segments, {PARTITIONS} partitions, "
          f"{SUBSCRIBERS} subscribers; interleaved small/large, median of {args.triggers} "
          f"triggers, {args.reps} passes (min-max in brackets); load avg "
          f"{m['load_avg_1m_start']:.1f} -> {m['load_avg_1m_end']:.1f}\n")  # fmt: skip
    n_s, n_l = st["small"]["segments"], st["large"]["segments"]
    print(f"| what | {n_s:,} retained | {n_l:,} retained | ratio | goal |")
    print("|---|---|---|---|---|")

    def row(name: str, rows: dict[str, list[dict[str, Any]]], key: str, goal: str, unit: str = "ms") -> None:  # fmt: skip
        a, b = med(rows["small"], key), med(rows["large"], key)
        print(f"| {name} | {a:,.0f} {unit} [{spread(rows['small'], key)}] | "
              f"{b:,.0f} {unit} [{spread(rows['large'], key)}] | "
              f"{b / max(a, 1e-9):,.1f}x | {goal} |")  # fmt: skip

    row("trigger: latestOffset + partitions + commit", t, "total_ms", "<= 1.2x")
    row("- latestOffset", t, "latestOffset_ms", "")
    row("- partitions", t, "partitions_ms", "")
    row("- commit (ack + retention pass)", t, "commit_ms", "")
    row("filesystem requests per trigger (FileIO calls)", t, "requests", "independent", "")
    row("directory entries listed per trigger", t, "entries_listed", "", "")
    row("a later retention pass of a process (incremental)", res["retention"], "later_ms", "")
    row("- its filesystem requests", res["retention"], "later_requests", "", "")
    row("a process's first retention pass (reads every .meta once)", res["retention"],
        "first_ms", "")  # fmt: skip
    row("`quiver status` (process wall time)", res["status"], "ms", "")
    row("`quiver gc` (process wall time, nothing deletable)", res["gc"], "ms", "")
    if "s3_trigger" in res:
        s3, s3st = res["s3_trigger"], res["s3_stores"]
        print(f"\nSegments on S3 (moto server on 127.0.0.1; HTTP requests counted at the server), "
              f"{s3st['small']['segments']:,} vs {s3st['large']['segments']:,} retained:\n")  # fmt: skip
        print(f"| what | {s3st['small']['segments']:,} retained | "
              f"{s3st['large']['segments']:,} retained | ratio | goal |")  # fmt: skip
        print("|---|---|---|---|---|")
        row("trigger wall time", s3, "total_ms", "<= 1.2x")
        row("S3 requests per trigger", s3, "requests", "independent of retained", "")
        kinds = sorted({k for r in s3["large"] for k in r["by_kind"]})
        for k in kinds:
            a = statistics.median(r["by_kind"].get(k, 0) for r in s3["small"])
            b = statistics.median(r["by_kind"].get(k, 0) for r in s3["large"])
            print(f"| - {k} | {a:,.0f} | {b:,.0f} | {b / max(a, 1e-9):,.1f}x | |")
    if "churn" in res:
        ch = res["churn"]
        print(f"\nPartition churn on S3 (moto): {args.churn_small} vs {args.churn_large} executor "
              "identities ever seen (4 at a time, each wrote once, drained):\n")  # fmt: skip
        print(f"| what | layout | {args.churn_small} identities | {args.churn_large} identities "
              "| ratio | goal |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for layout in ("pool", "host-named"):
            a_k, b_k = f"{layout}, {args.churn_small}", f"{layout}, {args.churn_large}"
            parts = f"{ch['built'][a_k]['partitions']} / {ch['built'][b_k]['partitions']}"
            pair = {"small": ch["trigger"][a_k], "large": ch["trigger"][b_k]}
            for what, key, unit, goal in (("trigger wall time", "total_ms", "ms", "<= 1.2x"),
                                          ("S3 requests per trigger", "requests", "", "flat")):  # fmt: skip
                a, b = med(pair["small"], key), med(pair["large"], key)
                print(f"| {what} | {layout}, {parts} partitions | {a:,.0f} {unit} | "
                      f"{b:,.0f} {unit} | {b / max(a, 1e-9):,.2f}x | {goal} |")  # fmt: skip
    for key, what in (("ack_files", "before a checkpoint"), ("ack_files_checkpointed", "checkpointed")):
        acks = st["large"][key]
        print(f"\nSubscriber files of the large store, {what}: {sum(acks.values()) / 1024:,.1f} "
              f"KiB ({', '.join(f'{k} {v / 1024:,.1f} KiB' for k, v in acks.items())})")  # fmt: skip
    print(f"\nStores built in {st['small']['build_s']:.0f} s / {st['large']['build_s']:.0f} s.\n")
    print(f"Profile of one trigger at {n_l:,} retained segments (quiver_spark functions by "
          "cumulative time; `calls` shows what scales with retained segments):\n")
    print("| function | calls | cumulative ms | own ms |")
    print("|---|---|---|---|")
    for r in res["profile_large"][:15]:
        print(f"| `{r['function']}` | {r['calls']:,} | {r['cum_ms']:,.0f} | {r['self_ms']:,.0f} |")


if __name__ == "__main__":
    sys.exit(main())
