"""P11: a sustained run of Quiver against the file pipeline a user would build instead.

Two pipelines, one after the other with the same settings (running both at once
on a 2-core machine would make each the other's noise):

- **quiver**: a rate-limited producer (Spark's ``rate`` source, ``--rate`` rows/s
  plus a ~50-byte string) into the quiver sink with ``retention.size_cap`` under
  ``backpressure``; two subscribers read it with the quiver source.
- **files**: the same producer into Spark's Parquet file sink; two file-source
  streams read the output directory (through the sink's ``_spark_metadata`` log).

The two consumers are the same in both: a fast one (``--fast-trigger``) and a
throttled one that reads at most ``--slow-fraction`` x ``--rate`` rows per second
(``--slow-trigger`` and a cap per trigger: ``maxRowsPerTrigger`` for quiver, the
same rows as ``maxFilesPerTrigger`` for the file source, whose producer writes two
files a batch). Each consumer records, per row ``value``, the time it arrived in a
``foreachBatch`` call; the commit time of a producer batch is its trigger start
plus its trigger execution less the commit-log write (Spark's progress).
Commit-to-visible = arrival - commit, over the rows committed after the first
``min(60 s, duration / 5)`` (the consumers start after the first batch).

Sampled every ``--sample`` seconds: bytes on disk of the data (the store, or the
sink's output directory; checkpoints separately), RSS of the JVM and of the Python
workers, rows produced and seen. After ``--duration`` seconds the producer stops,
the throttled consumer restarts from its checkpoint without its cap, both drain, and
every row is audited: seen
exactly once per subscriber, none missing.

Output: ``bench/results/soak.json``, ``soak.md`` and ``soak_*.png`` (matplotlib,
``pip install -e '.[bench]'``). Run: ``make bench-soak`` or
``.venv/bin/python bench/bench_soak.py [--duration 600] [--rate 20000]``; a quick
check: ``--duration 60``. Reported figures need ``--duration`` >= 600 (per pipeline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from benchdata import run_ended, run_started

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SCHEMA = "value long, s string"
PAGE = 4096


# -- measuring --------------------------------------------------------------------------------
def du(path: str) -> tuple[int, int]:
    """(bytes allocated on disk, files) under ``path``."""
    total = files = 0
    for dirpath, _dirs, names in os.walk(path):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
            files += 1
    return total, files


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, command name, RSS bytes) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            out[int(d)] = (int(fields[1]), name, int(fields[21]) * PAGE)
        except (OSError, ValueError, IndexError):
            continue
    return out


def rss_of_descendants(root_pid: int) -> dict[str, int]:
    """RSS of the JVM and of the Python workers started under ``root_pid``."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _n, _r) in table.items():
        children.setdefault(ppid, []).append(pid)
    jvm = py_sum = py_max = py_n = 0
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        _ppid, name, rss = table[pid]
        if name == "java":
            jvm += rss
        elif name.startswith("python"):
            py_sum += _pss(pid)  # forked workers share pages: a sum of RSS would count them twice
            py_max = max(py_max, rss)
            py_n += 1
    return {"jvm_rss": jvm, "py_workers_pss": py_sum, "py_worker_rss_max": py_max,
            "py_workers": py_n}  # fmt: skip


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Arrivals:
    """Per row ``value``: when a consumer first saw it (seconds), and duplicates."""

    def __init__(self, capacity: int) -> None:
        self.t = np.full(capacity, np.nan, dtype=np.float64)
        self.dups = 0
        self.seen = 0
        self.batches = 0
        self.lock = threading.Lock()

    def add(self, values: np.ndarray, when: float) -> None:
        with self.lock:
            if len(values) and values.max() >= len(self.t):
                grow = max(int(values.max()) + 1, 2 * len(self.t))
                self.t = np.concatenate([self.t, np.full(grow - len(self.t), np.nan)])
            uniq, counts = np.unique(values, return_counts=True)
            old = ~np.isnan(self.t[uniq])
            self.dups += int(old.sum()) + int((counts - 1).sum())
            fresh = uniq[~old]
            self.t[fresh] = when
            self.seen += len(fresh)
            self.batches += 1


# -- one pipeline (run in its own process) ---------------------------------------------------
def run_pipeline(kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["TMPDIR"] = str(work)
    from pyspark.sql import SparkSession

    spark = (
        # task slots beyond the 2 cores: producer tasks waiting under backpressure hold
        # their slots, and with only 2 the subscribers that would free space cannot run;
        # 3 attempts per task: a batch that waited longer than the timeout is retried
        SparkSession.builder.master(args.master)
        .appName(f"quiver-bench-soak-{kind}")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", str(work / "spark"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    data = str(work / "data")
    ckpt = work / "ckpt"
    capacity = int(args.rate * (args.duration + 300) * 1.2)
    arrivals = {"fast": Arrivals(capacity), "slow": Arrivals(capacity)}
    t0 = time.time()

    sink_options = {
        "segment.target_size": args.target_size,
        "segment.max_open_duration": args.max_open,
        "retention.size_cap": args.size_cap,
        "retention.size_cap_policy": "backpressure",
        "retention.backpressure_timeout": "120s",
    }
    if kind == "quiver":
        from quiver_spark import QuiverStore
        from quiver_spark.spark.options import store_config
        from quiver_spark.subscribers import StartPosition, SubscriberRegistry

        # both subscribers exist before the first write: nothing is reclaimed before they
        # read (the store is created with the sink's options, as its first write would)
        config = store_config({"path": data, **sink_options})
        QuiverStore.open(data, config, partition=None, create=True, background=False).close()
        with SubscriberRegistry.open(data) as reg:
            for name in arrivals:
                reg.register(name, start=StartPosition.EARLIEST, exist_ok=True)

    produced = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", args.rate)
        .option("numPartitions", 2)
        .load()
        .selectExpr(
            "value",
            "concat('event-', lpad(cast(value AS string), 12, '0'), "
            "'-payload-abcdefghijklmnopqrstuvwxyz') AS s",
        )
    )
    w = produced.writeStream.option("checkpointLocation", str(ckpt / "producer"))
    if kind == "quiver":
        w = w.format("quiver").options(**sink_options)
    else:
        w = w.format("parquet")
    producer = w.trigger(processingTime=args.producer_trigger).start(data)
    while not any(p["numInputRows"] for p in producer.recentProgress):
        if producer.exception() is not None:
            raise RuntimeError(f"producer failed: {producer.exception()}")
        time.sleep(0.2)

    # the throttled consumer reads at most slow_fraction x rate rows per second: a row cap
    # per trigger (quiver), or the same rows in files (a producer batch of 1 s writes 2)
    slow_rows = int(args.slow_fraction * args.rate * _seconds(args.slow_trigger))
    slow_files = max(1, round(slow_rows / (args.rate * _seconds(args.producer_trigger) / 2)))

    def consumer(name: str, slow: bool, drain: bool = False):
        def on_batch(df: Any, _batch_id: int) -> None:
            when = time.time() - t0
            values = df.select("value").toArrow().column(0).to_numpy()
            arrivals[name].add(values, when)

        if kind == "quiver":
            src = spark.readStream.format("quiver").option("subscriber", name)
            if slow and not drain:
                src = src.option("maxRowsPerTrigger", slow_rows)
            df = src.load(data)
        else:
            src = spark.readStream.schema(SCHEMA)
            if slow and not drain:
                src = src.option("maxFilesPerTrigger", slow_files)
            df = src.parquet(data)
        w = df.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(ckpt / name))
        if drain:
            return w.trigger(availableNow=True).start()
        return w.trigger(processingTime=args.slow_trigger if slow else args.fast_trigger).start()

    consumers = {"fast": consumer("fast", False), "slow": consumer("slow", True)}
    samples: list[dict[str, Any]] = []
    me = os.getpid()

    def produced_rows() -> int:
        return sum(p["numInputRows"] for p in producer.recentProgress)

    def sample() -> None:
        data_b, files = du(data)
        ckpt_b, _ = du(str(ckpt))
        parts = {n: du(os.path.join(data, n))[0] for n in sorted(os.listdir(data))
                 if os.path.isdir(os.path.join(data, n))}  # fmt: skip
        samples.append({"t": time.time() - t0, "data_bytes": data_b, "data_files": files,
                        "data_dirs": parts,
                        "checkpoint_bytes": ckpt_b, **rss_of_descendants(me),
                        "produced": produced_rows(),
                        **{f"seen_{k}": a.seen for k, a in arrivals.items()}})  # fmt: skip

    end = t0 + args.duration
    while time.time() < end:
        sample()
        for q in (producer, *consumers.values()):
            if q.exception() is not None:
                raise RuntimeError(f"{q.name or q.id} failed: {q.exception()}")
        time.sleep(max(0.0, min(args.sample, end - time.time())))
    # stop the producer between two batches, then let both consumers drain at full speed
    t_stop = time.time()
    while producer.status["isTriggerActive"] and time.time() - t_stop < 60:
        time.sleep(0.01)
    producer.stop()
    run_s = time.time() - t0
    total = produced_rows()
    # drain: the throttled consumer restarts from its checkpoint without its cap and
    # reads what is there (Trigger.AvailableNow; again if rows were sealed meanwhile)
    drain_t = time.time()
    consumers["slow"].stop()
    restarts = 0
    while time.time() - drain_t < args.drain_timeout and any(
        a.seen < total for a in arrivals.values()
    ):
        if not consumers["slow"].isActive and arrivals["slow"].seen < total and restarts < 20:
            time.sleep(1)
            consumers["slow"] = consumer("slow", True, drain=True)
            restarts += 1
        time.sleep(1)
        if time.time() - samples[-1]["t"] - t0 >= args.sample:
            sample()
    time.sleep(3)  # a duplicate would arrive now
    drained_s = time.time() - drain_t
    sample()
    errors = {k: str(q.exception()) for k, q in consumers.items() if q.exception() is not None}
    for q in consumers.values():
        q.stop()
    progress = list(producer.recentProgress)
    spark.stop()

    # commit time of every producer batch, and the value range it wrote (values are dense)
    bounds, commits, start = [], [], 0
    batches = sorted((p for p in progress if p["numInputRows"]), key=lambda p: p["batchId"])
    for p in batches:
        ts = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        d = p["durationMs"]
        commits.append(ts - t0 + (d.get("triggerExecution", 0) - d.get("commitOffsets", 0)) / 1e3)
        start += p["numInputRows"]
        bounds.append(start)
    bounds_a, commits_a = np.array(bounds), np.array(commits)
    out: dict[str, Any] = {
        "kind": kind, "run_s": run_s, "drain_s": drained_s, "produced_rows": total,
        "producer_batches": len(batches), "samples": samples, "errors": errors,
        "producer_rows_per_s": total / run_s,
        "producer_batch_ms_median": statistics.median(
            p["durationMs"].get("triggerExecution", 0) for p in batches) if batches else None,
        "producer_timeline": [[c, b] for c, b in zip(commits, bounds, strict=True)],
    }  # fmt: skip
    hist_edges = np.arange(0, run_s + drained_s + 10, 10)
    warmup = min(60.0, args.duration / 5)
    for name, a in arrivals.items():
        t = a.t[:total]
        seen = ~np.isnan(t)
        extra = int((~np.isnan(a.t[total:])).sum())  # rows beyond what the producer reported
        committed = commits_a[np.searchsorted(bounds_a, np.nonzero(seen)[0], side="right")]
        lat_ms = (t[seen] - committed) * 1e3
        steady = lat_ms[committed >= warmup]  # rows committed after the consumers started
        out[name] = {
            "seen": int(seen.sum()), "missing": int(total - seen.sum()), "duplicates": a.dups,
            "beyond_produced": extra, "batches": a.batches,
            "exactly_once": bool(seen.all() and a.dups == 0 and extra == 0),
            "latency_ms_p50": float(np.percentile(steady, 50)) if len(steady) else None,
            "latency_ms_p99": float(np.percentile(steady, 99)) if len(steady) else None,
            "latency_ms_max": float(steady.max()) if len(steady) else None,
            "latency_from_s": warmup,
            # p50/p99 of the rows produced in each 30 s window (for the plots)
            "latency_timeline": _windows(np.nonzero(seen)[0], lat_ms, bounds_a, commits_a, 30.0),
            "arrival_hist": np.histogram(t[seen], bins=hist_edges)[0].tolist(),
        }
    return out


def _seconds(text: str) -> float:
    """A Spark trigger interval ("5 seconds", "500 milliseconds") in seconds."""
    n, unit = text.split()
    return float(n) / (1000 if unit.startswith("milli") else 1)


def _windows(values: np.ndarray, lat_ms: np.ndarray, bounds: np.ndarray, commits: np.ndarray,
             width: float) -> list[list[float]]:  # fmt: skip
    """[window start s, p50 ms, p99 ms] of the rows committed in each window."""
    when = commits[np.searchsorted(bounds, values, side="right")]
    out = []
    for w0 in np.arange(0, when.max() + width, width) if len(when) else []:
        m = (when >= w0) & (when < w0 + width)
        if m.any():
            out.append([float(w0), float(np.percentile(lat_ms[m], 50)),
                        float(np.percentile(lat_ms[m], 99))])  # fmt: skip
    return out


# -- report -----------------------------------------------------------------------------------
def mb(b: float) -> str:
    return f"{b / 2**20:,.0f} MB"


def summarize(r: dict[str, Any], duration: float) -> dict[str, Any]:
    s = [x for x in r["samples"] if x["t"] <= r["run_s"]]
    later = [x for x in s if x["t"] >= duration / 2]  # second half: flat or growing?
    first = [x for x in s if x["t"] < duration / 2]
    return {
        "disk_max": max(x["data_bytes"] for x in s),
        "disk_end": s[-1]["data_bytes"],
        "disk_half1_max": max((x["data_bytes"] for x in first), default=0),
        "disk_half2_max": max((x["data_bytes"] for x in later), default=0),
        "files_end": s[-1]["data_files"],
        "dirs_at_max": max(s, key=lambda x: x["data_bytes"]).get("data_dirs", {}),
        "py_rss_max": max(x["py_worker_rss_max"] for x in s),
        "py_pss_sum_max": max(x["py_workers_pss"] for x in s),
        "py_rss_half1_max": max((x["py_worker_rss_max"] for x in first), default=0),
        "py_rss_half2_max": max((x["py_worker_rss_max"] for x in later), default=0),
        "jvm_rss_max": max(x["jvm_rss"] for x in s),
        "slow_lag_end_rows": s[-1]["produced"] - s[-1]["seen_slow"],
    }


def report(res: dict[str, Any]) -> str:
    a = res["args"]
    lines = [
        f"P11 sustained run: {a['duration']:.0f} s per pipeline, one after the other, same "
        f"settings: rate source {a['rate']:,} rows/s (2 partitions, value + ~50-byte string), "
        f"producer trigger {a['producer_trigger']}, fast consumer trigger {a['fast_trigger']}, "
        f"throttled consumer trigger {a['slow_trigger']} at {a['slow_fraction']:.0%} of the "
        f"rate; quiver: size cap {a['size_cap']} (backpressure), segment.target_size "
        f"{a['target_size']}, segment.max_open_duration {a['max_open']}; Spark "
        f"{a['master']}, one application per pipeline. Load avg "
        f"{res['load_avg'][0]:.1f} at start, {res['load_avg'][1]:.1f} at end; 2 cores.",
        "",
        "| measure | quiver | file pipeline (Parquet sink + 2 file-source streams) |",
        "|---|---|---|",
    ]
    q, f = res["quiver"], res["files"]
    sq, sf = summarize(q, a["duration"]), summarize(f, a["duration"])
    rows = [
        ("producer throughput (rows committed / run time)",
         f"{q['producer_rows_per_s']:,.0f} rows/s", f"{f['producer_rows_per_s']:,.0f} rows/s"),
        ("producer batches, median batch time",
         f"{q['producer_batches']}, {q['producer_batch_ms_median']:.0f} ms",
         f"{f['producer_batches']}, {f['producer_batch_ms_median']:.0f} ms"),
    ]  # fmt: skip
    for c in ("fast", "slow"):
        rows.append((f"commit -> visible, {c} subscriber, p50 / p99",
                     f"{q[c]['latency_ms_p50']:,.0f} / {q[c]['latency_ms_p99']:,.0f} ms",
                     f"{f[c]['latency_ms_p50']:,.0f} / {f[c]['latency_ms_p99']:,.0f} ms"))  # fmt: skip
    rows += [
        ("data on disk: max over the run (first half / second half)",
         f"{mb(sq['disk_max'])} ({mb(sq['disk_half1_max'])} / {mb(sq['disk_half2_max'])})",
         f"{mb(sf['disk_max'])} ({mb(sf['disk_half1_max'])} / {mb(sf['disk_half2_max'])})"),
        ("data on disk at its max, by directory",
         ", ".join(f"{k} {mb(v)}" for k, v in sq["dirs_at_max"].items() if v >= 2**20),
         ", ".join(f"{k} {mb(v)}" for k, v in sf["dirs_at_max"].items() if v >= 2**20) or "-"),
        ("data on disk when the producer stopped; files", f"{mb(sq['disk_end'])}; {sq['files_end']:,}",
         f"{mb(sf['disk_end'])}; {sf['files_end']:,}"),
        ("Python worker RSS, max of one worker (first half / second half)",
         f"{mb(sq['py_rss_max'])} ({mb(sq['py_rss_half1_max'])} / {mb(sq['py_rss_half2_max'])})",
         f"{mb(sf['py_rss_max'])} ({mb(sf['py_rss_half1_max'])} / {mb(sf['py_rss_half2_max'])})"),
        ("all Python workers, max of their summed PSS (foreachBatch runs in the driver)",
         mb(sq["py_pss_sum_max"]), mb(sf["py_pss_sum_max"])),
        ("JVM RSS, max", mb(sq["jvm_rss_max"]), mb(sf["jvm_rss_max"])),
        ("throttled subscriber's lag when the producer stopped",
         f"{sq['slow_lag_end_rows']:,} rows", f"{sf['slow_lag_end_rows']:,} rows"),
        ("drain after the producer stopped", f"{q['drain_s']:.0f} s", f"{f['drain_s']:.0f} s"),
    ]  # fmt: skip
    for c in ("fast", "slow"):

        def audit(r: dict[str, Any], c: str = c) -> str:
            x = r[c]
            ok = "exactly once" if x["exactly_once"] else "FAILED"
            return (f"{ok}: {x['seen']:,} of {r['produced_rows']:,} rows, {x['missing']:,} "
                    f"missing, {x['duplicates']:,} duplicates, {x['beyond_produced']} extra")  # fmt: skip

        rows.append((f"audit, {c} subscriber", audit(q), audit(f)))
    for name, x, y in rows:
        lines.append(f"| {name} | {x} | {y} |")
    for k in ("quiver", "files"):
        if res[k]["errors"]:
            lines.append(f"\n{k}: query errors {res[k]['errors']}")
    lines.append("\nPlots: " + ", ".join(f"`bench/results/{p}`" for p in res.get("plots", [])))
    return "\n".join(lines)


def plot(res: dict[str, Any]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no plots", file=sys.stderr)
        return []
    names = []
    colors = {"quiver": "tab:blue", "files": "tab:orange"}
    labels = {"quiver": "quiver", "files": "Parquet file pipeline"}
    cap = _bytes(res["args"]["size_cap"])
    charts = [
        ("soak_disk.png", "data on disk (MB)", lambda s: s["data_bytes"] / 2**20),
        ("soak_worker_rss.png", "largest Python worker RSS (MB)",
         lambda s: s["py_worker_rss_max"] / 2**20),
        ("soak_jvm_rss.png", "JVM RSS (MB)", lambda s: s["jvm_rss"] / 2**20),
    ]  # fmt: skip
    for fname, ylabel, fn in charts:
        fig, ax = plt.subplots(figsize=(8, 4))
        for k in ("quiver", "files"):
            s = res[k]["samples"]
            ax.plot([x["t"] for x in s], [fn(x) for x in s], color=colors[k], label=labels[k])
            ax.axvline(res[k]["run_s"], color=colors[k], ls=":", lw=0.8)
        if fname == "soak_disk.png" and cap:
            ax.axhline(cap / 2**20, color="gray", ls="--", lw=0.8, label="quiver size cap")
        ax.set_xlabel("seconds since start (dotted: producer stopped)")
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(RESULTS / fname, dpi=100)
        plt.close(fig)
        names.append(fname)
    # throughput: producer and each consumer, rows/s per 10 s
    fig, ax = plt.subplots(figsize=(8, 4))
    for k in ("quiver", "files"):
        tl = res[k]["producer_timeline"]
        t = np.array([c for c, _ in tl])
        n = np.diff(np.array([0] + [b for _, b in tl]))
        edges = np.arange(0, res[k]["run_s"] + 10, 10)
        hist, _ = np.histogram(t, bins=edges, weights=n)
        ax.plot(edges[:-1], hist / 10, color=colors[k], label=f"{labels[k]}: produced")
        for c, ls in (("fast", "--"), ("slow", ":")):
            h = res[k][c]["arrival_hist"]
            ax.plot(np.arange(len(h)) * 10, np.array(h) / 10, color=colors[k], ls=ls, lw=0.8,
                    label=f"{labels[k]}: {c} subscriber")  # fmt: skip
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("rows/s (10 s bins)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "soak_throughput.png", dpi=100)
    plt.close(fig)
    names.append("soak_throughput.png")
    fig, ax = plt.subplots(figsize=(8, 4))
    for k in ("quiver", "files"):
        tl = res[k]["fast"]["latency_timeline"]
        ax.plot([x[0] for x in tl], [x[1] for x in tl], color=colors[k], label=f"{labels[k]} p50")
        ax.plot([x[0] for x in tl], [x[2] for x in tl], color=colors[k], ls="--",
                label=f"{labels[k]} p99")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("commit time, seconds since start (30 s windows)")
    ax.set_ylabel("commit -> visible, fast subscriber (ms)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "soak_latency.png", dpi=100)
    plt.close(fig)
    names.append("soak_latency.png")
    return names


def _bytes(text: str) -> int:
    units = {"KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40, "B": 1}
    for u, f in units.items():
        if text.upper().endswith(u):
            return int(float(text[: -len(u)]) * f)
    return int(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=600, help="seconds per pipeline")
    ap.add_argument("--rate", type=int, default=40_000, help="producer rows/s")
    ap.add_argument("--slow-fraction", type=float, default=0.5,
                    help="the throttled consumer's speed, as a fraction of --rate")  # fmt: skip
    ap.add_argument("--size-cap", default="256MB")
    ap.add_argument("--target-size", default="8MB")
    ap.add_argument("--max-open", default="500ms")
    ap.add_argument("--producer-trigger", default="1 second")
    ap.add_argument("--fast-trigger", default="500 milliseconds")
    ap.add_argument("--slow-trigger", default="5 seconds")
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--master", default="local[4,3]")
    ap.add_argument("--drain-timeout", type=float, default=600)
    ap.add_argument("--only", choices=["quiver", "files"], help="(internal) run one pipeline")
    ap.add_argument("--result", help="(internal) where --only writes its JSON")
    args = ap.parse_args()
    if args.only:
        work = Path(tempfile.mkdtemp(prefix=f"quiver-bench-soak-{args.only}-"))
        try:
            r = run_pipeline(args.only, args, work)
        finally:
            time.sleep(2)
            shutil.rmtree(work, ignore_errors=True)
        Path(args.result).write_text(json.dumps(r))
        return 0
    run = run_started()
    res: dict[str, Any] = {"args": vars(args), "command": "bench/bench_soak.py "
                           + " ".join(sys.argv[1:]), "load_avg": [os.getloadavg()[0]]}  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="quiver-bench-soak-"))
    try:
        for kind in ("quiver", "files"):  # one after the other: never both on 2 cores at once
            out = tmp / f"{kind}.json"
            cmd = [sys.executable, __file__, *sys.argv[1:], "--only", kind, "--result", str(out)]
            t = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-6000:])
                return 1
            res[kind] = json.loads(out.read_text())
            res[kind]["wall_s"] = time.time() - t
            res[kind]["load_avg_end"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_avg"].append(os.getloadavg()[0])
    res["run"] = run_ended(run)
    RESULTS.mkdir(exist_ok=True)
    res["plots"] = plot(res)
    text = report(res)
    (RESULTS / "soak.json").write_text(json.dumps(res, indent=1))
    (RESULTS / "soak.md").write_text(text + "\n")
    print(text)
    ok = all(res[k][c]["exactly_once"] for k in ("quiver", "files") for c in ("fast", "slow"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
