"""P13: a store whose root is on S3 (moto on loopback): requests per operation, their
cost, and commit-to-visible latency beside a local root.

Requests are counted where a bill counts them: a small HTTP proxy sits between the
store and ``moto_server`` (both started here) and records every request by kind (GET,
HEAD, LIST, PUT, conditional PUT = ``If-Match`` / ``If-None-Match``, DELETE, POST,
COPY) and by key (``segments/<pid>/<n>.arrow``, ``partitions/<pid>/MANIFEST`` ...).
Each measured operation is bracketed by markers the proxy records, so a new process
(``quiver status``, a restarted writer or consumer) is counted the same way.

Operations, on two stores of the same shape (4 partitions, a subscriber ``slow`` that
acknowledged nothing, consumers that acknowledged all but the newest segment of each
partition) with ``--small`` and ``--large`` retained segments:

- a micro-batch as the Spark sink runs it, through its own classes without Spark:
  planning (``streamWriter()`` on the driver), the task (its slot's transaction +
  WAL flush), the commit (``streamWriter()`` again, the decision, sealing orphaned
  slots) and the segment's finalize (with the retention pass after it);
- a subscriber's poll that sees the new segment, and its ``ack`` (the ack flush);
- an idle trigger: ``Subscription.poll`` with nothing new, and the Spark source's
  ``latestOffset`` (``ack(start)`` + ``next_batch_end``), every ``--trigger`` seconds
  (rate-limited work is averaged in);
- a process start: a writer's open + first retention pass, a consumer's open + first
  poll, ``quiver status`` (each a new process);
- one lease renewal; an hour of an idle writer slot (measured over
  ``--idle-writer-seconds``) and of an idle subscriber (``--idle-seconds``), scaled.

Latency (``--only latency``): a writer commits a transaction every ``--commit-every``
seconds and its maintenance seals it after ``segment.max_open_duration``; a
subscriber polls every ``--trigger`` seconds; commit -> rows seen, p50/p99, local root
and S3 root (moto, no proxy) in alternating rounds of one run.

Cost: requests per day priced at S3 Standard request prices (see PRICES).

Run: ``.venv/bin/python bench/bench_object_requests.py [--large 2000] [--json]``
(writes bench/results/object_requests.json and prints markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchdata import run_ended, run_started  # noqa: E402
from churn import churn, copy_objects  # noqa: E402

from quiver_spark import QuiverStore  # noqa: E402
from quiver_spark.config import SegmentConfig, StoreConfig  # noqa: E402
from quiver_spark.subscription import Subscription  # noqa: E402
from quiver_spark.subscription.position import Position  # noqa: E402
from tests.moto_server import ForwardingProxy, moto_server  # noqa: E402

PY = sys.executable
QUIVER = str(Path(sys.executable).with_name("quiver"))
BUCKET = "qbench"
PARTITIONS = 4
KINDS = ["GET", "HEAD", "LIST", "PUT", "CPUT", "COPY", "POST", "DELETE"]
TIER1 = {"PUT", "CPUT", "COPY", "POST", "LIST"}
FREE = {"DELETE"}
PRICES = {
    "tier1_per_1000": 0.005,  # PUT, COPY, POST, LIST (a conditional PUT is a PUT)
    "tier2_per_1000": 0.0004,  # GET, HEAD and other requests
    "delete_per_1000": 0.0,  # DELETE requests are free
    "as_of": "2026-02 (S3 Standard, us-east-1 request prices as AWS publishes them)",
}


# -- moto and the counting proxy -------------------------------------------------------------
def s3_options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "AKIABENCHKEY00000000",
        "aws_secret_access_key": "bench-secret-0123456789",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


_SHAPES = [
    (re.compile(r"^(segments|partitions)/[^/]+/"), r"\1/<pid>/"),
    (re.compile(r"^commits/[^/]+/"), "commits/<app>/"),
    (re.compile(r"^readers/[^/]+?\.(lease|lost\.jsonl)$"), r"readers/<sub>.\1"),
    (re.compile(r"^subscribers/records/[^/]+\.sub$"), "subscribers/records/<sub>.sub"),
    (re.compile(r"^metrics/[^/]+\.prom$"), "metrics/<instance>.prom"),
    (re.compile(r"\d{20}"), "<n>"),
]


def shape(key: str) -> str:
    """``segments/p-1/00000000000000000007.arrow`` -> ``segments/<pid>/<n>.arrow``."""
    for rx, to in _SHAPES:
        key = rx.sub(to, key)
    return key


class CountingProxy(ForwardingProxy):
    """Forwards every request to ``target`` and records ``(kind, key shape, status)``;
    ``GET /__mark__/<label>`` (or :meth:`mark`) records a marker instead."""

    def __init__(self, target: str) -> None:
        self.events: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self.prefixes: list[str] = []  # root prefixes (stripped from keys)
        super().__init__(target)

    def intercept(self, path: str) -> bool:
        if not path.startswith("/__mark__/"):
            return False
        self.mark(urllib.parse.unquote(path.removeprefix("/__mark__/")))
        return True

    def answered(self, method: str, path: str, headers: Any, status: int) -> bool:
        self.record(method, path, headers, status)
        return False

    def record(self, method: str, path: str, headers: Any, status: int) -> None:
        url = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(url.query)
        key = urllib.parse.unquote(url.path).removeprefix(f"/{BUCKET}").lstrip("/")
        if method == "GET" and ("list-type" in query or not key):
            kind, key = "LIST", query.get("prefix", [""])[0]
        elif method == "PUT" and headers.get("x-amz-copy-source"):
            kind = "COPY"
        elif method == "PUT" and (headers.get("If-Match") or headers.get("If-None-Match")):
            kind = "CPUT"
        else:
            kind = method
        for p in self.prefixes:
            if key.startswith(p + "/") or key == p:
                key = key[len(p) :].lstrip("/")
                break
        with self._lock:
            self.events.append((kind, shape(key), status))

    def mark(self, label: str) -> None:
        with self._lock:
            self.events.append(("MARK", label, 0))

    def between(self, start: str, end: str) -> list[tuple[str, str, int]]:
        """The requests recorded between the markers ``start`` and ``end``."""
        with self._lock:
            ev = list(self.events)
        i = max(n for n, e in enumerate(ev) if e == ("MARK", start, 0))
        j = next(n for n in range(i + 1, len(ev)) if ev[n] == ("MARK", end, 0))
        return [e for e in ev[i + 1 : j] if e[0] != "MARK"]


MARK_SNIPPET = """
import urllib.request, sys
def mark(label):
    urllib.request.urlopen(sys.argv[1] + "/__mark__/" + label, timeout=10).read()
"""


class Counted:
    """Requests of one operation, repeated: per-kind median, the usual breakdown."""

    def __init__(self) -> None:
        self.reps: list[list[tuple[str, str, int]]] = []

    def add(self, events: list[tuple[str, str, int]]) -> None:
        self.reps.append(events)

    def kinds(self, events: list[tuple[str, str, int]]) -> Counter[str]:
        return Counter(k for k, _, _ in events)

    def typical(self) -> list[tuple[str, str, int]]:
        """The rep whose per-kind counts are the most common (a lease renewal or a
        rate-limited pass of another thread falling into one rep does not count)."""
        sig = [tuple(sorted(self.kinds(r).items())) for r in self.reps]
        best = Counter(sig).most_common(1)[0][0]
        return self.reps[sig.index(best)]

    def mean(self) -> dict[str, float]:
        n = max(1, len(self.reps))
        total: Counter[str] = Counter()
        for r in self.reps:
            total.update(self.kinds(r))
        return {k: v / n for k, v in total.items()}

    def summary(self, *, averaged: bool = False) -> dict[str, Any]:
        typ = self.typical() if self.reps else []
        counts = self.mean() if averaged else dict(self.kinds(typ))
        by_key = Counter(f"{k} {key}" + ("" if st < 300 else f" ({st})") for k, key, st in typ)
        return {
            "counts": counts,
            "total": sum(counts.values()),
            "reps": len(self.reps),
            "all_reps": [dict(self.kinds(r)) for r in self.reps],
            "by_key": dict(sorted(by_key.items())),
        }


def cost_per_day(per_day: dict[str, float]) -> float:
    t1 = sum(v for k, v in per_day.items() if k in TIER1)
    free = sum(v for k, v in per_day.items() if k in FREE)
    t2 = sum(per_day.values()) - t1 - free
    return t1 / 1000 * PRICES["tier1_per_1000"] + t2 / 1000 * PRICES["tier2_per_1000"]


# -- building a store ------------------------------------------------------------------------
def pid_of(i: int) -> str:
    return f"p-{i}"


def build_store(root: str, opts: dict[str, str], n_segments: int, consumers: int) -> dict:
    """``n_segments`` segments over :data:`PARTITIONS` partitions (one writer per
    partition, in threads), subscriber ``slow`` at the earliest segment and consumers
    ``c-<j>`` that acknowledged all but the newest segment of each partition."""
    t0 = time.perf_counter()
    batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
    with QuiverStore.open(root, partition=None, storage_options=opts) as store:
        store.ensure_schema(batch.schema)
    per = [n_segments // PARTITIONS + (1 if i < n_segments % PARTITIONS else 0)
           for i in range(PARTITIONS)]  # fmt: skip
    errors: list[BaseException] = []

    def fill(i: int) -> None:
        try:
            with QuiverStore.open(root, partition=pid_of(i), background=False,
                                  storage_options=opts) as w:  # fmt: skip
                for _ in range(per[i]):
                    w.append(batch)
                    w.flush()
                    w.finalize()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(PARTITIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    with Subscription.open(root, "slow", storage_options=opts) as sub:
        sub.start("earliest")
    for j in range(consumers):
        with Subscription.open(root, f"c-{j}", storage_options=opts) as sub:
            sub.start("earliest")
            sub.ack(Position({pid_of(i): per[i] - 1 for i in range(PARTITIONS) if per[i] > 1}))
    return {"segments": n_segments, "build_s": round(time.perf_counter() - t0, 1)}


# -- process starts ---------------------------------------------------------------------------
WRITER_START = (
    MARK_SNIPPET
    + """
import json
from quiver_spark import QuiverStore
opts = json.loads(sys.argv[3])
mark("start")
s = QuiverStore.open(sys.argv[2], partition="p-0", background=False, create=False,
                     storage_options=opts)
s.run_retention()
mark("end")
s.close()
"""
)

CONSUMER_START = (
    MARK_SNIPPET
    + """
import json
from quiver_spark.subscription import Subscription
opts = json.loads(sys.argv[3])
mark("start")
sub = Subscription.open(sys.argv[2], sys.argv[4], storage_options=opts)
batch = sub.poll()
mark("end")
assert batch is not None and len(batch.segments) == 4, batch
mark("ack")
sub.ack(batch.end)
mark("ack_end")
sub.close()
"""
)


def process_starts(proxy: CountingProxy, root: str, opts: dict[str, str], consumer: str,
                   out: dict[str, Counted]) -> None:  # fmt: skip
    js = json.dumps(opts)
    for name, code, extra in [("writer", WRITER_START, []),
                              ("consumer", CONSUMER_START, [consumer])]:  # fmt: skip
        subprocess.run([PY, "-c", code, proxy.endpoint, root, js, *extra], check=True,
                       capture_output=True)  # fmt: skip
        out.setdefault(f"start: {name}", Counted()).add(proxy.between("start", "end"))
        if name == "consumer":
            out.setdefault("first ack of a restarted consumer", Counted()).add(
                proxy.between("ack", "ack_end")
            )
    args = [QUIVER, "status", root, "--json"]
    for k, v in opts.items():
        args += ["-S", f"{k}={v}"]
    proxy.mark("status")
    subprocess.run(args, check=True, capture_output=True)
    proxy.mark("status_end")
    out.setdefault("start: quiver status (whole process)", Counted()).add(
        proxy.between("status", "status_end")
    )


# -- the micro-batch cycle --------------------------------------------------------------------
def sink_cycles(proxy: CountingProxy, root: str, opts: dict[str, str], reps: int,
                every_s: float, out: dict[str, Counted]) -> None:  # fmt: skip
    """``reps`` micro-batches through the sink's own writer classes, one every
    ``every_s``; after each, a subscriber polls and acknowledges the new segment."""
    from pyspark.sql.types import LongType, StructField, StructType

    from quiver_spark.spark import slots
    from quiver_spark.spark.sink import QuiverStreamWriter

    options = {"path": root, **{f"storage.{k}": v for k, v in opts.items()},
               "segment.max_open_duration": "1s"}  # fmt: skip
    schema = StructType([StructField("id", LongType(), True)])
    # the slot the task claims, opened as slot_store does but without the maintenance
    # thread: the bench runs its tick (QuiverStore.maintain) itself once the segment is due
    first = QuiverStreamWriter(options, schema, False)
    slot = QuiverStore.open_slot(first.root, first.config, host=slots.host_tag(),
                                 storage_options=first.storage, background=False)  # fmt: skip
    slots._handles[slots._key(first.root, first.config, first.storage)] = slot
    app = f"query-{uuid.uuid4().hex[:8]}"
    batch = pa.record_batch({"id": pa.array(range(100), pa.int64())})
    sub = Subscription.open(root, "bench-sub", storage_options=opts)
    sub.start("latest")
    try:
        for v in range(reps + 1):  # batch 0 opens the slot (a process start)
            t0 = time.monotonic()
            proxy.mark("plan")
            w = QuiverStreamWriter(options, schema, False)  # pickled to the task as is
            proxy.mark("task")
            msg = w._write_txn(iter([batch]), app, v, f"0.0.{v}")
            appended = time.monotonic()
            proxy.mark("commit")
            QuiverStreamWriter(options, schema, False)._commit([msg], v)
            time.sleep(max(0.0, first.config.segment.max_open_duration_s
                           - (time.monotonic() - appended)))  # fmt: skip
            proxy.mark("finalize")
            assert slot.maintain()["finalized"]  # the maintenance tick that seals it
            proxy.mark("poll")
            got = sub.poll()
            assert got is not None and got.segments, got
            for meta in got.segments:
                for _ in sub.read(meta):
                    pass
            proxy.mark("ack")
            sub.ack(got.end)
            proxy.mark("done")
            if v == 0:
                continue
            for a, b, name in [
                ("plan", "task", "micro-batch: planning (streamWriter() on the driver)"),
                ("task", "commit", "micro-batch: task (slot txn + WAL flush)"),
                ("commit", "finalize", "micro-batch: commit (streamWriter(), decision, orphans)"),
                ("finalize", "poll", "micro-batch: maintenance tick that seals it (+ retention)"),
                ("poll", "ack", "subscriber: poll + read of the new segment"),
                ("ack", "done", "subscriber: ack flush (Subscription.ack)"),
            ]:
                out.setdefault(name, Counted()).add(proxy.between(a, b))
            time.sleep(max(0.0, every_s - (time.monotonic() - t0)))
        lease = slot.writer.lease if slot.writer is not None else None
        if lease is not None:
            for _ in range(3):
                proxy.mark("renew")
                lease.renew()
                proxy.mark("renewed")
                out.setdefault("writer lease renewal (Lease.renew)", Counted()).add(
                    proxy.between("renew", "renewed")
                )
    finally:
        sub.close()
        slots.close_all()


def idle_triggers(proxy: CountingProxy, root: str, opts: dict[str, str], trigger_s: float,
                  seconds: float, out: dict[str, Counted]) -> dict[str, float]:  # fmt: skip
    """A live subscriber with nothing new, triggered every ``trigger_s`` for ``seconds``
    the way the Spark source is (``latestOffset``: ``ack(start)`` + ``next_batch_end``);
    returns its requests per hour, everything included (its lease's renewals). Then
    a few ``Subscription.poll`` calls with nothing new, one per trigger."""
    sub = Subscription.open(root, "bench-sub", storage_options=opts)
    try:
        start = sub.acked()
        proxy.mark("hour")
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < seconds or n < 5:  # moto lists slowly: >= 5 triggers
            n += 1
            t = time.monotonic()
            proxy.mark("trig")
            with sub.one_call():  # as the source's latestOffset does
                sub.ack(start)
                assert not sub.next_batch_end(start).is_after(start)
            proxy.mark("trig_end")
            out.setdefault("idle trigger: Spark latestOffset (ack(start) + plan)", Counted()).add(
                proxy.between("trig", "trig_end")
            )
            time.sleep(max(0.0, trigger_s - (time.monotonic() - t)))
        took = time.monotonic() - t0
        proxy.mark("hour_end")
        for _ in range(5):
            t = time.monotonic()
            proxy.mark("poll")
            assert sub.poll() is None
            proxy.mark("poll_end")
            out.setdefault("idle trigger: Subscription.poll, nothing new", Counted()).add(
                proxy.between("poll", "poll_end")
            )
            time.sleep(max(0.0, trigger_s - (time.monotonic() - t)))
    finally:
        sub.close()
    events = proxy.between("hour", "hour_end")
    per_hour = Counter(k for k, _, _ in events)
    return {k: v * 3600 / took for k, v in per_hour.items()}


def idle_writer(proxy: CountingProxy, root: str, opts: dict[str, str],
                seconds: float) -> dict[str, Any]:  # fmt: skip
    """A sink slot's store (default options, maintenance thread on) writing nothing."""
    store = QuiverStore.open(root, partition="idle-0", storage_options=opts)
    try:
        time.sleep(2.0)  # past the open
        proxy.mark("idle")
        t0 = time.monotonic()
        time.sleep(seconds)
        proxy.mark("idle_end")
        took = time.monotonic() - t0
    finally:
        store.close()
    events = proxy.between("idle", "idle_end")
    scale = 3600 / took
    by_key = Counter(f"{k} {key}" for k, key, _ in events)
    return {
        "per_hour": {k: v * scale for k, v in Counter(k for k, _, _ in events).items()},
        "by_key_per_hour": {k: round(v * scale) for k, v in sorted(by_key.items())},
        "seconds": took,
    }


# -- latency ----------------------------------------------------------------------------------
def latency_round(root: str, opts: dict[str, str] | None, seconds: float, trigger_s: float,
                  commit_every_s: float, max_open_s: float) -> list[float]:  # fmt: skip
    """Commit -> seen by a subscriber's poll, in seconds, for every transaction."""
    config = StoreConfig(segment=SegmentConfig(max_open_duration_s=max_open_s))
    store = QuiverStore.open(root, config, partition="lat-0", storage_options=opts)
    committed: dict[int, float] = {}
    seen: list[float] = []
    stop = threading.Event()
    sub = Subscription.open(root, "lat-sub", config=config, storage_options=opts)
    sub.start("latest")

    def consume() -> None:
        while not stop.is_set():
            t = time.monotonic()
            got = sub.poll()
            if got is not None:
                now = time.monotonic()
                for meta in got.segments:
                    for rb in sub.read(meta):
                        for i in rb.column("id").to_pylist():
                            if i in committed:
                                seen.append(now - committed.pop(i))
                sub.ack(got.end)
            stop.wait(max(0.0, trigger_s - (time.monotonic() - t)))

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    app = f"lat-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    v = 0
    try:
        while time.monotonic() - t0 < seconds:
            t = time.monotonic()
            ids = pa.array([v], pa.int64())
            txn = store.begin_txn(app, v)
            store.append(pa.record_batch({"id": ids}), txn_id=txn)
            store.flush()
            assert store.writer is not None
            store.commit_txn(app, v, [(store.writer.pid, txn)], 1)
            committed[v] = time.monotonic()
            v += 1
            time.sleep(max(0.0, commit_every_s - (time.monotonic() - t)))
        deadline = time.monotonic() + max_open_s + 3 * trigger_s + 5
        while committed and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join()
        sub.close()
        store.close()
    return seen


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def latency(endpoint: str, tmp: str, args: argparse.Namespace) -> dict[str, Any]:
    opts = s3_options(endpoint)
    roots = {"local": os.path.join(tmp, "lat-local"),
             "s3": f"s3://{BUCKET}/lat-{uuid.uuid4().hex[:8]}"}  # fmt: skip
    samples: dict[str, list[float]] = {k: [] for k in roots}
    rounds: dict[str, list[float]] = {k: [] for k in roots}
    for _ in range(args.rounds):
        for k, root in roots.items():
            got = latency_round(root, opts if k == "s3" else None, args.round_seconds,
                                args.trigger, args.commit_every, args.max_open)  # fmt: skip
            samples[k] += got
            rounds[k].append(statistics.median(got) if got else float("nan"))
    return {
        "trigger_s": args.trigger,
        "max_open_duration_s": args.max_open,
        "commit_every_s": args.commit_every,
        "rounds": args.rounds,
        "round_p50_s": rounds,
        **{
            k: {"n": len(v), "p50_s": pct(v, 0.5), "p99_s": pct(v, 0.99)}
            for k, v in samples.items()
        },
    }


# -- reporting --------------------------------------------------------------------------------
def fmt_counts(c: dict[str, float]) -> str:
    parts = [f"{k} {v:g}" if isinstance(v, int) or float(v).is_integer() else f"{k} {v:.2f}"
             for k in KINDS if (v := c.get(k))]  # fmt: skip
    return ", ".join(parts) or "none"


# -- partition churn ----------------------------------------------------------------------------
CHURN_START = (
    MARK_SNIPPET
    + """
import json
from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription
root, opts, partition = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
mark("start")
s = QuiverStore.open(root, partition=partition, background=False, create=False,
                     storage_options=opts)
s.run_retention()
mark("end")
s.close()
mark("consumer")
sub = Subscription.open(root, "exporter", storage_options=opts)
assert sub.poll() is None, "the churned store is drained"
mark("consumer_end")
for _ in range(5):
    mark("poll")
    assert sub.poll() is None
    mark("poll_end")
sub.close()
"""
)


def churn_requests(endpoint: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    """Partition churn: stores that ``--churn-small`` and ``--churn-large`` executor
    identities wrote (4 at a time, each once, exiting cleanly; a subscriber read and
    acknowledged everything: the data drained), in the slot pool (``w-<k>``) and
    host-named (a partition per pod, before the pool). Each is built on memory:// with
    the same code and its objects are then put into the bucket (an HTTP round trip per
    request of 1,000 pods would take minutes). Counted per store: a writer's start
    (open of the first partition + first retention pass), a restarted consumer's
    first trigger (open + poll, nothing new), an idle poll of that consumer, and
    ``quiver status``."""
    proxy = CountingProxy(endpoint)
    direct, counted = s3_options(endpoint), s3_options(proxy.endpoint)
    out: dict[str, Any] = {"built": {}, "operations": {}}
    try:
        for layout in ("pool", "host-named"):
            for n in (args.churn_small, args.churn_large):
                key = f"{layout}, {n} identities"
                mem = f"memory://churn/{layout}-{n}"
                built = churn(mem, n, layout, Path(tmp) / f"churn-{layout}-{n}")
                root = f"s3://{BUCKET}/churn-{layout}-{n}-{uuid.uuid4().hex[:8]}"
                built["objects"] = copy_objects(mem, root, direct)
                out["built"][key] = built
                proxy.prefixes.append(root.removeprefix(f"s3://{BUCKET}/"))
                first = "w-0" if layout == "pool" else "pod-00000-0"
                ops: dict[str, Counted] = {}
                for _ in range(args.churn_reps):
                    subprocess.run([PY, "-c", CHURN_START, proxy.endpoint, root,
                                    json.dumps(counted), first],
                                   check=True, capture_output=True)  # fmt: skip
                    for name, a, b in (("start: writer (open + first retention pass)", "start", "end"),
                                       ("start: consumer (open + first poll)", "consumer", "consumer_end"),
                                       ("idle poll (Subscription.poll, nothing new)", "poll", "poll_end")):  # fmt: skip
                        ops.setdefault(name, Counted()).add(proxy.between(a, b))
                    cmd = [QUIVER, "status", root, "--json"]
                    for k, v in counted.items():
                        cmd += ["-S", f"{k}={v}"]
                    proxy.mark("status")
                    subprocess.run(cmd, check=True, capture_output=True)
                    proxy.mark("status_end")
                    ops.setdefault("start: quiver status (whole process)", Counted()).add(
                        proxy.between("status", "status_end")
                    )
                out["operations"][key] = {name: c.summary() for name, c in ops.items()}
    finally:
        proxy.close()
    return out


def report(res: dict[str, Any], small: int, large: int) -> None:
    ops = res.get("operations")
    if ops:
        print(f"| operation (S3 requests; moto) | {small} retained segments | "
              f"{large} retained segments |")  # fmt: skip
        print("|---|---|---|")
        for name, per in ops["small"].items():
            other = ops["large"].get(name)
            a = f"**{per['total']:g}**: {fmt_counts(per['counts'])}"
            b = f"**{other['total']:g}**: {fmt_counts(other['counts'])}" if other else "-"
            print(f"| {name} | {a} | {b} |")
        print()
        print("Where the requests of each operation go (small store, typical repetition):")
        print()
        for name, per in ops["small"].items():
            keys = "; ".join(f"{k} x{n}" for k, n in per["by_key"].items())
            print(f"- {name}: {keys or 'none'}")
        print()
    ch = res.get("churn")
    if ch:
        keys = list(ch["operations"])
        print("Partition churn (executor identities ever seen, 4 at a time, drained; S3 "
              "requests, typical repetition):")  # fmt: skip
        print()
        print("| operation | " + " | ".join(f"{k} ({ch['built'][k]['partitions']} partitions)"
                                           for k in keys) + " |")  # fmt: skip
        print("|---|" + "---|" * len(keys))
        for name in ch["operations"][keys[0]]:
            cells = [ch["operations"][k][name] for k in keys]
            print(f"| {name} | " + " | ".join(
                f"**{c['total']:g}**: {fmt_counts(c['counts'])}" for c in cells) + " |")  # fmt: skip
        print()
    cost = res.get("cost")
    if cost:
        print("| per day (S3 Standard request prices) | requests | of which PUT/LIST class "
              "| USD |")  # fmt: skip
        print("|---|---|---|---|")
        for name, c in cost["rows"].items():
            print(f"| {name} | {c['requests']:,.0f} | {c['tier1']:,.0f} | ${c['usd']:.3f} |")
        print()
        print(f"Prices: PUT/COPY/POST/LIST ${PRICES['tier1_per_1000']} per 1,000, GET/HEAD "
              f"${PRICES['tier2_per_1000']} per 1,000, DELETE free; as of {PRICES['as_of']}.")  # fmt: skip
        print()
    lat = res.get("latency")
    if lat:
        print(f"| commit -> visible (trigger {lat['trigger_s'] * 1e3:.0f} ms, "
              f"segment.max_open_duration {lat['max_open_duration_s'] * 1e3:.0f} ms) "
              "| p50 | p99 | n |")  # fmt: skip
        print("|---|---|---|---|")
        for k in ("local", "s3"):
            x = lat[k]
            print(f"| {k} root | {x['p50_s'] * 1e3:.0f} ms | {x['p99_s'] * 1e3:.0f} ms "
                  f"| {x['n']} |")  # fmt: skip
        d = lat["s3"]["p50_s"] - lat["local"]["p50_s"]
        goal = lat["trigger_s"] + 0.3
        print(f"| S3 - local | {d * 1e3:+.0f} ms | "
              f"{(lat['s3']['p99_s'] - lat['local']['p99_s']) * 1e3:+.0f} ms | goal p50 "
              f"<= +{goal * 1e3:.0f} ms: {'met' if d <= goal else 'missed'} |")  # fmt: skip
        print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=40)
    ap.add_argument("--large", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5, help="micro-batches / process starts")
    ap.add_argument("--batch-every", type=float, default=5.0, help="seconds per micro-batch")
    ap.add_argument("--trigger", type=float, default=1.0, help="trigger interval, seconds")
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="idle subscriber")
    ap.add_argument("--idle-writer-seconds", type=float, default=180.0,
                    help="idle writer (3 of its 60 s retention periods)")  # fmt: skip
    ap.add_argument("--max-open", type=float, default=1.0, help="latency: max_open_duration")
    ap.add_argument("--commit-every", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-seconds", type=float, default=20.0)
    ap.add_argument("--churn-small", type=int, default=4, help="executor identities")
    ap.add_argument("--churn-large", type=int, default=1000, help="executor identities")
    ap.add_argument("--churn-reps", type=int, default=3)
    ap.add_argument("--only", choices=["requests", "latency", "churn"])
    ap.add_argument("--json", action="store_true", help="print the JSON instead of markdown")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "object_requests.json"))
    args = ap.parse_args()
    run = run_started()
    tmp = tempfile.mkdtemp(prefix="quiver-objreq-")
    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")  # the WALs of object roots
    res: dict[str, Any] = {"args": vars(args)}
    try:
        with moto_server(BUCKET) as endpoint:
            if args.only in (None, "requests"):
                res.update(requests(endpoint, args))
            if args.only in (None, "churn"):
                res["churn"] = churn_requests(endpoint, args, tmp)
            if args.only in (None, "latency"):
                res["latency"] = latency(endpoint, tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["prices"] = PRICES
    res["run"] = run_ended(run)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2, default=str))
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        report(res, args.small, args.large)
    return 0


def requests(endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    proxy = CountingProxy(endpoint)
    try:
        direct = s3_options(endpoint)
        counted = s3_options(proxy.endpoint)
        roots = {k: f"s3://{BUCKET}/{k}-{uuid.uuid4().hex[:8]}" for k in ("small", "large")}
        proxy.prefixes = [r.removeprefix(f"s3://{BUCKET}/") for r in roots.values()]
        built = {k: build_store(r, direct, args.small if k == "small" else args.large,
                                args.reps) for k, r in roots.items()}  # fmt: skip
        ops: dict[str, dict[str, Counted]] = {k: {} for k in roots}
        for j in range(args.reps):  # interleaved: small, large, small, ...
            for k, root in roots.items():
                process_starts(proxy, root, counted, f"c-{j}", ops[k])
        for k, root in roots.items():
            sink_cycles(proxy, root, counted, args.reps, args.batch_every, ops[k])
        hours: dict[str, dict[str, float]] = {}
        for k, root in roots.items():
            secs = args.idle_seconds if k == "small" else min(args.idle_seconds, 10 * args.trigger)
            hours[k] = idle_triggers(proxy, root, counted, args.trigger, secs, ops[k])
        writer = idle_writer(proxy, roots["small"], counted, args.idle_writer_seconds)
    finally:
        proxy.close()
    summaries = {
        k: {name: c.summary(averaged=name.startswith("idle trigger")) for name, c in per.items()}
        for k, per in ops.items()
    }
    day = 24.0
    batches_per_day = 86400 / args.batch_every
    small = summaries["small"]

    def per_batch(names: list[str]) -> Counter[str]:
        total: Counter[str] = Counter()
        for n in names:
            total.update(small[n]["counts"])
        return total

    writer_batch = per_batch([n for n in small if n.startswith("micro-batch")])
    sub_batch = per_batch(["subscriber: poll + read of the new segment",
                           "subscriber: ack flush (Subscription.ack)"])  # fmt: skip
    rows_in: dict[str, dict[str, float]] = {
        "writer slot, idle": {k: v * day for k, v in writer["per_hour"].items()},
        f"writer slot, 1 micro-batch per {args.batch_every:g} s": {
            k: writer["per_hour"].get(k, 0) * day + writer_batch.get(k, 0) * batches_per_day
            for k in KINDS
        },
        f"subscriber, idle (trigger {args.trigger:g} s)": {
            k: v * day for k, v in hours["small"].items()
        },
        # triggers that find a new segment plan, read and ack instead of an idle trigger
        f"subscriber, 1 new segment per {args.batch_every:g} s (trigger {args.trigger:g} s)": {
            k: hours["small"].get(k, 0) * day * max(0.0, 1 - args.trigger / args.batch_every)
            + sub_batch.get(k, 0) * batches_per_day
            for k in KINDS
        },
    }
    rows = {
        name: {
            "requests": sum(c.values()),
            "tier1": sum(v for k, v in c.items() if k in TIER1),
            "usd": cost_per_day(c),
            "by_kind": {k: round(v) for k, v in c.items() if v},
        }
        for name, c in rows_in.items()
    }
    return {
        "built": built,
        "operations": summaries,
        "idle_writer": writer,
        "idle_subscriber_per_hour": hours,
        "cost": {"rows": rows, "batch_every_s": args.batch_every, "trigger_s": args.trigger},
    }


if __name__ == "__main__":
    raise SystemExit(main())
