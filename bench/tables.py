"""README's benchmark tables, rendered from ``bench/results/*.json`` and nothing else.

One block per result file, each headed by the record of the run that measured it
(date, commit, cores, load, versions: ``benchdata.run_started``) and the command that
produced it. Every figure is written once; a ratio is the one the benchmark measured
side by side in its run, never one computed across runs.

Usage: ``.venv/bin/python bench/tables.py`` prints the blocks; ``--write`` replaces
the blocks between README.md's ``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->``
markers (``make bench`` does it after running); ``--check`` exits 1 naming the blocks
that differ.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE.parent / "README.md"
COMMAND = ".venv/bin/python bench/tables.py --write"

Data = dict[str, Any]


# -- formatting -------------------------------------------------------------------------------
def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def ratio(x: float, *, bold: bool = False) -> str:
    s = f"{x:.2f}x" if x < 10 else f"{x:,.0f}x"
    return f"**{s}**" if bold else s


def goal(text: str, met: bool | None) -> str:
    return text if met is None else f"{text} ({'met' if met else 'missed'})"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


# -- the record of a run ----------------------------------------------------------------------
def run_of(data: Data, part: str | None = None) -> Data | None:
    """The record of the run that measured ``part`` of a result file (its ``run``, or
    the earlier run a partial rerun kept the part from); ``None`` if not recorded."""
    kept = data.get("earlier_runs", {})
    if part is not None and part in kept:
        return kept[part]
    return data.get("run")


def _loads(run: Data) -> str:
    a, b = run["load_avg_start"], run.get("load_avg_end")
    text = f"load average (1/5/15 min) {'/'.join(f'{x:.1f}' for x in a)} at the start"
    if b:
        text += f", {'/'.join(f'{x:.1f}' for x in b)} at the end"
    return text


def describe_run(run: Data | None, legacy: Data) -> str:
    """One sentence on a run: when, which code, which machine under which load."""
    if run is None:
        got = [f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {str(v).strip()}"
               for k, v in legacy.items() if v is not None]  # fmt: skip
        return ("Its result file has no run record (an older format: no commit or versions"
                + ("" if "date" in legacy else ", no date")
                + ("; it records " + ", ".join(got) if got else "") + ").")  # fmt: skip
    names = {"python": "Python", "pyarrow": "pyarrow", "pyspark": "PySpark"}
    versions = ", ".join(f"{names[k]} {run[k]}" for k in names if run.get(k))
    took = f", took {num(run['seconds'])} s" if "seconds" in run else ""
    return (f"Run {run['date'].replace('T', ' ').removesuffix('+00:00')} UTC at commit "
            f"`{run.get('commit') or 'unknown'}` on {run['cores']} cores, {_loads(run)}; "
            f"{versions}{took}. Command: `{run['command']}`.")  # fmt: skip


def header(
    title: str, data: Data, parts: list[str] | None = None, legacy: Data | None = None
) -> str:
    """``title`` and the run (or the runs, one per part) that measured the block."""
    legacy = legacy or {}
    if not parts:
        return f"{title}. {describe_run(run_of(data), legacy)}"
    by_run: dict[str, list[str]] = {}
    for p in parts:
        by_run.setdefault(json.dumps(run_of(data, p), sort_keys=True), []).append(p)
    if len(by_run) == 1:
        return f"{title}. {describe_run(run_of(data, parts[0]), legacy)}"
    out = [f"{title}, from {len(by_run)} runs."]
    for key, ps in by_run.items():
        out.append(f"{', '.join(ps)}: {describe_run(json.loads(key), legacy)}")
    return " ".join(out)


# -- one renderer per result file -------------------------------------------------------------
def wal(d: Data) -> str:
    g = d["gb_per_s"]
    mb = d["bytes"] / 1e6
    rows = [
        ["P4", f"WAL append of {d['batches']} x {num(d['rows_per_batch'])}-row batches "
         f"({num(mb)} MB), 25 ms group fsync; median of {d['rounds']} interleaved rounds",
         f"{g['wal_group_fsync']:.2f} GB/s",
         f"raw `write` + `fdatasync` of the same bytes, {g['raw']:.2f} GB/s",
         ratio(d["ratio_group_fsync_vs_raw"], bold=True),
         goal(f">= {d['goal']}x", d["ratio_group_fsync_vs_raw"] >= d["goal"])],
        ["P4", "the same, fsync per append (context)", f"{g['wal_fsync_per_append']:.2f} GB/s",
         "the same raw baseline", ratio(d["ratio_fsync_per_append_vs_raw"]), "-"],
    ]  # fmt: skip
    legacy = {"date": d.get("date"), "cores": d.get("cores"), "command": d.get("command")}
    return "\n\n".join(
        [
            header("WAL append (P4)", d, legacy=legacy),
            table(["#", "what", "Quiver", "baseline, same run", "ratio", "goal"], rows),
        ]
    )


def segment(d: Data) -> str:
    g = d["gbps"]
    r = d["ratio_scan_vs_raw"]
    rows = [
        ["P5", f"cold full scan of a {mib(d['size_bytes'])} segment ({num(d['rows'])} rows, "
         f"{d['batches']} batches; mmap, CRC verified, every batch touched), page cache dropped "
         f"({d['cache_drop']}) before each run; median of {d['rounds']} interleaved rounds",
         f"{g['scan']:.2f} GB/s", f"raw sequential read, {g['raw']:.2f} GB/s", ratio(r, bold=True),
         goal(">= 0.5x and >= 1 GB/s", r >= 0.5 and g["scan"] >= 1.0)],
        ["P5", "CRC-32C of the same bytes, warm (context)", f"{d['crc_verify_gbps']:.1f} GB/s",
         "-", "-", "-"],
        ["P5", "writing the segment: write + fsync + publish, one run (context)",
         f"{d['write_gbps']:.2f} GB/s", "-", "-", "-"],
    ]  # fmt: skip
    return "\n\n".join(
        [
            header("Segment scan (P5)", d, legacy={"cores": d.get("cpus")}),
            table(["#", "what", "Quiver", "baseline, same run", "ratio", "goal"], rows),
        ]
    )


def recovery(d: Data) -> str:
    t = d["open_s_median"]
    rows = [[
        "P6", f"open after kill -9 with a full WAL: {mib(d['wal_bytes'])} of undecided records "
        f"({num(d['records'])} records), all verified and replayed; median of "
        f"{len(d['open_s_all'])} fresh processes",
        f"{ms(t)} ({d['gb_per_s']:.2f} GB/s)", goal(f"<= {d['goal_s']:g} s", t <= d["goal_s"]),
    ]]  # fmt: skip
    return "\n\n".join(
        [header("Recovery (P6, WAL)", d), table(["#", "what", "Quiver", "goal"], rows)]
    )


def acklog(d: Data) -> str:
    budget = d["budget_ms"]
    label = {
        "log": f"open of {num(d['records'])} ack records ({d['subscribers']} subscribers x "
        f"{d['partitions']} partitions), the whole log replayed",
        "checkpoint+tail": "the same after a checkpoint, {tail} records replayed after it",
    }
    rows = []
    for r in d["rows"]:
        what = label.get(r["case"], r["case"]).format(tail=num(r["records_replayed"]))
        rows.append(["P6", what, f"{r['open_ms']:,.0f} ms (CPU {r['cpu_ms']:,.0f} ms)",
                     goal(f"<= {budget / 1e3:g} s", r["open_ms"] <= budget)])  # fmt: skip
    legacy = {"load average (1 min)": d.get("load_average_1m"), "cores": d.get("cpus")}
    return "\n\n".join(
        [
            header("Ack log open (P6, ack log)", d, legacy=legacy),
            table(["#", "what", "Quiver", "goal"], rows),
        ]
    )


def sink(d: Data) -> str:
    p1, p2, p8 = d["P1"], d["P2"], d["P8"]
    q, n, pq = med(p1["quiver_s"]), med(p1["noop_python_s"]), med(p2["parquet_s"])
    reps = len(p1["quiver_s"])
    rows = [
        ["P1", f"streaming sink, {num(d['rows'])} rows; median of {reps} interleaved runs",
         f"{q:.2f} s, {p2['quiver_rows_per_s'] / 1e6:.2f} M rows/s",
         f"Python no-op Arrow sink, {n:.2f} s", ratio(p1["ratio_time_quiver_over_noop"], bold=True)
         + " time", goal("<= 1.05x", p1["ratio_time_quiver_over_noop"] <= 1.05)],
        ["P2", "the same runs", "(P1)", f"Spark Parquet sink, {pq:.2f} s, "
         f"{p2['parquet_rows_per_s'] / 1e6:.2f} M rows/s",
         ratio(p2["ratio_rows_per_s_quiver_over_parquet"], bold=True) + " rows/s",
         goal(">= 1.0x", p2["ratio_rows_per_s_quiver_over_parquet"] >= 1.0)],
    ]  # fmt: skip
    for m in p8:
        rows.append(["P8", f"peak RSS of a sink Python worker, `segment.target_size` "
                     f"{m['target_size']}", f"{m['peak_rss_bytes'] / 2**20:,.0f} MB",
                     f"bound 2 x target + 200 MB = {m['bound_bytes'] / 2**20:,.0f} MB", "-",
                     goal("within the bound", m["within_goal"])])  # fmt: skip
    for m in d["P9"]:
        b = m["batch_ms_median"]
        p95 = med(m["batch_ms_p95_per_run"]["quiver"])
        rounds = ", ".join(f"{x:.2f}" for x in m["ratio_quiver_over_noop_per_round"])
        rows.append([
            "P9", f"one micro-batch of {num(m['rows_per_batch'])} rows (median over "
            f"{m['batches_per_run']} batches a run, median of {m['rounds']} interleaved rounds)",
            f"{b['quiver']:,.0f} ms (p95 {p95:,.0f} ms)",
            f"no-op Python sink {b['pynoop']:,.0f} ms; Parquet {b['parquet']:,.0f} ms",
            f"{ratio(m['ratio_quiver_over_noop'], bold=True)} the no-op (rounds {rounds}); "
            f"{ratio(m['ratio_quiver_over_parquet'])} Parquet",
            goal("<= 1.1x the no-op", m["ratio_quiver_over_noop"] <= 1.1),
        ])  # fmt: skip
    legacy = {"cores": d.get("cores"), "load average (1 min) at the start of its last run":
              d.get("load_avg_1m_start"), "at the end": d.get("load_avg_1m_end")}  # fmt: skip
    return "\n\n".join(
        [
            header("Sink (P1, P2, P8, P9)", d, ["P1", "P2", "P8", "P9"], legacy),
            table(["#", "what", "Quiver", "baseline, same run", "ratio", "goal"], rows),
        ]
    )


def source(d: Data) -> str:
    s, b, p7 = d["P3"]["stream"], d["P3"]["batch"], d["P7"]
    reps = len(s["quiver_s"])
    per = ", ".join(f"{x:.2f}" for x in s["ratio_quiver_vs_floor_per_rep"])
    per_packed = ", ".join(f"{x:.2f}" for x in s["ratio_quiver_vs_floor_packed_per_rep"])
    spark = p7.get("spark_p50_ms", {})
    floor_goal = float(s["goal_vs_floor"].removeprefix(">="))
    names = {"walCommit": "offset log", "commitOffsets": "commit log",
             "queryPlanning": "planning", "latestOffset": "Quiver's `latestOffset`"}  # fmt: skip
    rows = [
        ["P3", f"streaming source -> noop, {num(d['rows'] / 1e6)}M rows "
         f"({mib(d['arrow_bytes'])} Arrow), `Trigger.AvailableNow`; median of {reps} "
         "interleaved rounds", f"{s['quiver_rows_per_s'] / 1e6:.2f} M rows/s",
         "the Python floor: a minimal `DataSourceStreamReader` over the same `.arrow` files, "
         f"one task per file, {s['floor_rows_per_s'] / 1e6:.2f} M rows/s",
         f"{ratio(s['ratio_quiver_vs_floor'], bold=True)} (rounds {per})",
         goal(f"{s['goal_vs_floor']}x", s["ratio_quiver_vs_floor"] >= floor_goal)],
        ["P3", "the same (context)", "(above)", f"the floor packed into Quiver's "
         f"{s['quiver_tasks']} tasks ({s['segments']} files), "
         f"{s['floor_packed_rows_per_s'] / 1e6:.2f} M rows/s",
         f"{ratio(s['ratio_quiver_vs_floor_packed'])} (rounds {per_packed})", "-"],
        ["P3", "the same (context)", "(above)",
         f"Spark Parquet file source, {s['parquet_rows_per_s'] / 1e6:.2f} M rows/s",
         ratio(s["ratio_quiver_vs_parquet"]), "-"],
        ["P3", "PySpark's fixed start of any Python stream source (an empty one, same run), "
         "and Quiver's query time less it (context)",
         f"{s['empty_python_source_median_s']:.2f} s per query", "Parquet's whole query",
         ratio(s["ratio_excluding_python_source_startup"]), "-"],
        ["P3", "batch read -> noop (context)", f"{b['quiver_rows_per_s'] / 1e6:.2f} M rows/s",
         f"Parquet, {b['parquet_rows_per_s'] / 1e6:.2f} M rows/s",
         ratio(b["ratio_quiver_vs_parquet"]), "-"],
        ["P7", f"sink commit -> visible in a subscriber's batch, {p7['trigger_ms']} ms trigger, "
         f"`segment.max_open_duration={p7['segment.max_open_duration']}`; {p7['samples']} "
         "commits", f"p50 {p7['p50_ms']:,.0f} ms, p99 {p7['p99_ms']:,.0f} ms",
         "Spark's own work per micro-batch, p50: " + ", ".join(
             f"{names.get(k, k)} {v:,.0f} ms" for k, v in spark.items()) if spark else "-",
         "-", goal(f"p50 <= {p7['goal_p50_ms']} ms", p7["p50_ms"] <= p7["goal_p50_ms"])],
    ]  # fmt: skip
    m = d.get("machine", {})
    legacy = {"cores": m.get("cpus"), "load average (1 min) at the start of its last run":
              m.get("load_avg_1m"), "at the end": m.get("load_avg_1m_end"),
              "command of its last run": d.get("command")}  # fmt: skip
    return "\n\n".join(
        [
            header("Source (P3, P7)", d, ["P3", "P7"], legacy),
            table(["#", "what", "Quiver", "baseline, same run", "ratio", "goal"], rows),
        ]
    )


def churned(built: dict[str, Data]) -> dict[str, tuple[str, str]]:
    """A churn section's stores by layout: ``layout -> (key of the fewest executor
    identities, key of the most)``, in the order the benchmark built them."""
    by: dict[str, list[str]] = {}
    for key, b in built.items():
        by.setdefault(b["layout"] + (" (POSIX)" if "POSIX" in key else "")
                      + (" (S3)" if "S3" in key else ""), []).append(key)  # fmt: skip
    return {lay: (min(ks, key=lambda k: built[k]["identities"]),
                  max(ks, key=lambda k: built[k]["identities"])) for lay, ks in by.items()}  # fmt: skip


def churn_head(built: dict[str, Data], a: str, b: str, layout: str) -> list[str]:
    """The row naming a churn pair: identities ever seen and the partitions they left."""
    x, y = built[a], built[b]
    return [f"partition churn, {layout}: executor identities ever seen, 4 at a time, each "
            "wrote once, drained (partitions left)",
            f"{num(x['identities'])} ({num(x['partitions'])})",
            f"{num(y['identities'])} ({num(y['partitions'])})", "-", "-"]  # fmt: skip


def trigger(d: Data) -> str:
    t, st = d["trigger"], d["stores"]

    def pair(rows: dict[str, list[Data]], key: str, fmt: Callable[[float], str]) -> list[str]:
        a, b = med([r[key] for r in rows["small"]]), med([r[key] for r in rows["large"]])
        return [fmt(a), fmt(b), ratio(b / a) if a else "-"]

    def msf(x: float) -> str:
        return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"

    n = len(t["small"])
    rows = [
        [f"retained segments ({st['small']['partitions']} partitions, "
         f"{st['small']['subscribers']} subscribers)", num(st["small"]["segments"]),
         num(st["large"]["segments"]), "-", "-"],
        [f"one source trigger: `latestOffset` + `partitions` + `commit` (ack and retention "
         f"pass); median of {n}", *pair(t, "total_ms", msf), "<= 1.2x"],
        ["- its file-layer calls", *pair(t, "requests", num), "independent of retained"],
        ["a later retention pass of a process", *pair(d["retention"], "later_ms", msf), "-"],
        ["a process's first retention pass (reads every `.meta` once)",
         *pair(d["retention"], "first_ms", msf), "-"],
        ["`quiver status`, a new process", *pair(d["status"], "ms", msf), "-"],
        ["`quiver gc`, a new process (nothing deletable)", *pair(d["gc"], "ms", msf), "-"],
        ["the large store's ack log before / after a checkpoint", "-",
         f"{sum(st['large']['ack_files'].values()) / 1024:,.0f} KiB / "
         f"{sum(st['large']['ack_files_checkpointed'].values()) / 1024:,.0f} KiB", "-", "-"],
    ]  # fmt: skip
    a = med([r["total_ms"] for r in t["small"]])
    b = med([r["total_ms"] for r in t["large"]])
    rows[1][-1] = goal("<= 1.2x", b / a <= 1.2)
    if "s3_trigger" in d:
        s3, s3st = d["s3_trigger"], d["s3_stores"]
        rows += [
            ["segments retained on S3 (moto on loopback)", num(s3st["small"]["segments"]),
             num(s3st["large"]["segments"]), "-", "-"],
            ["one source trigger on S3", *pair(s3, "total_ms", msf), "-"],
            ["- its S3 requests", *pair(s3, "requests", num), "independent of retained"],
        ]  # fmt: skip
    if "churn" in d:
        ch = d["churn"]
        for layout, (a, b) in churned(ch["built"]).items():
            got = {"small": ch["trigger"][a], "large": ch["trigger"][b]}
            x, y = med([r["total_ms"] for r in got["small"]]), med([r["total_ms"] for r in got["large"]])
            rows += [
                churn_head(ch["built"], a, b, f"{layout} on S3"),
                ["- one source trigger", *pair(got, "total_ms", msf), goal("<= 1.2x", y / x <= 1.2)],
                ["- its S3 requests", *pair(got, "requests", num), "flat"],
            ]  # fmt: skip
    for r in rows:
        if r[-1] in ("independent of retained", "flat"):
            r[-1] = goal(r[-1], r[1] == r[2])
    m = d.get("machine", {})
    legacy = {"cores": m.get("cpus"), "load average (1 min) at the start":
              m.get("load_avg_1m_start"), "at the end": m.get("load_avg_1m_end"),
              "command": d.get("command")}  # fmt: skip
    return "\n\n".join(
        [
            header("Trigger cost vs retained segments (P10)", d, legacy=legacy),
            table(["what", "small store", "large store", "ratio", "goal"], rows),
        ]
    )


def startup(d: Data) -> str:
    t, built = d["times_s"], d["built"]
    label = {"status": "`quiver status`", "gc": "`quiver gc` (nothing deletable)",
             "consumer": "a restarted consumer's open + first poll + ack",
             "writer": "a writer's open + first retention pass"}  # fmt: skip
    rows = []
    for name in t["small"]:
        a, b = med(t["small"][name]), med(t["large"][name])
        reps = len(t["small"][name])
        rows.append([f"{label.get(name, name)}; median of {reps}", ms(a), ms(b),
                     ratio(b / a, bold=True), goal("<= 1.5x", b / a <= 1.5)])  # fmt: skip
    req = d["manifest_requests"]
    rows.append(["requests to the root's objects of a status run", num(sum(req["small"].values())),
                 num(sum(req["large"].values())), "-", "-"])  # fmt: skip
    if "gc_file_calls" in d:
        calls = d["gc_file_calls"]
        rows.append(["file-layer calls of a `quiver gc` run", num(calls["small"]),
                     num(calls["large"]), ratio(calls["large"] / calls["small"]), "-"])  # fmt: skip
    if "churn" in d:
        ch = d["churn"]
        for layout, (a, b) in churned(ch["built"]).items():
            rows.append(churn_head(ch["built"], a, b, layout))
            for name in ch["times_s"][a]:
                x, y = med(ch["times_s"][a][name]), med(ch["times_s"][b][name])
                rows.append([f"- {label.get(name, name).replace('open + first poll + ack', 'open + first poll')}",
                             ms(x), ms(y), ratio(y / x, bold=True), goal("<= 1.5x", y / x <= 1.5)])  # fmt: skip
            req = ch["status_requests"]
            if sum(req[a].values()) or sum(req[b].values()):  # an object root's status reads none
                rows.append(["- manifest requests of a status run", num(sum(req[a].values())),
                             num(sum(req[b].values())), "-", "-"])  # fmt: skip
    head = ["a new process (interleaved)", f"{num(built['small']['segments'])} retained segments",
            f"{num(built['large']['segments'])} retained segments", "ratio", "goal"]  # fmt: skip
    title = "Start of a new process vs retained segments (P12)"
    return "\n\n".join([header(title, d), table(head, rows)])


def idle_poll(d: Data) -> str:
    head = ["root", "partitions", "shape", "idle poll: requests", "idle poll: median",
            "idle latestOffset: requests", "idle latestOffset: median", "goal"]  # fmt: skip
    rows = []
    for kind, by_n in d["roots"].items():
        for n, shapes in by_n.items():
            for shape, got in shapes.items():
                req = {w: max(sum(r.values()) for r in got[w]["requests"])
                       for w in ("poll", "latest_offset")}  # fmt: skip
                rows.append([kind, num(int(n)), shape, num(req["poll"]), ms(med(got["poll"]["s"])),
                             num(req["latest_offset"]), ms(med(got["latest_offset"]["s"])),
                             goal("<= 2 requests", max(req.values()) <= 2)])  # fmt: skip
    title = (f"An idle subscriber's trigger vs the partitions (requests counted at the object "
             f"layer, the most of {d['triggers']} triggers; seconds their median)")  # fmt: skip
    return "\n\n".join([header(title, d), table(head, rows)])


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)B", text.strip().upper())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def soak_disk(r: Data, duration: float) -> dict[str, int]:
    """Maxima over a pipeline's samples while its producer ran, as ``bench_soak.summarize``
    takes them (the second half shows whether disk stayed flat or grew)."""
    s = [x for x in r["samples"] if x["t"] <= r["run_s"]]
    return {
        "disk_max": max(x["data_bytes"] for x in s),
        "disk_half1_max": max((x["data_bytes"] for x in s if x["t"] < duration / 2), default=0),
        "disk_half2_max": max((x["data_bytes"] for x in s if x["t"] >= duration / 2), default=0),
        "jvm_rss_max": max(x["jvm_rss"] for x in s),
    }


def soak(d: Data) -> str:
    a = d["args"]
    q, f = d["quiver"], d["files"]
    sq, sf = soak_disk(q, a["duration"]), soak_disk(f, a["duration"])
    cap = _parse_size(a["size_cap"])

    def lat(r: Data, c: str) -> str:
        return f"p50 {r[c]['latency_ms_p50']:,.0f} ms, p99 {r[c]['latency_ms_p99']:,.0f} ms"

    def audit(r: Data) -> str:
        ok = all(r[c]["exactly_once"] for c in ("fast", "slow"))
        return f"{'every row exactly once' if ok else 'FAILED'} ({num(r['produced_rows'])} rows)"

    def mb(x: float) -> str:
        return f"{x / 2**20:,.0f} MB"

    rows = [
        ["producer, rows committed / run time", f"{q['producer_rows_per_s']:,.0f} rows/s",
         f"{f['producer_rows_per_s']:,.0f} rows/s"],
        ["commit -> visible, fast subscriber", lat(q, "fast"), lat(f, "fast")],
        ["data on disk, max in the first / second half of the run",
         f"{mb(sq['disk_half1_max'])} / {mb(sq['disk_half2_max'])} "
         f"({ratio(sq['disk_max'] / cap)} the cap)",
         f"{mb(sf['disk_half1_max'])} / {mb(sf['disk_half2_max'])}"],
        ["JVM RSS, max", mb(sq["jvm_rss_max"]), mb(sf["jvm_rss_max"])],
        ["audit, both subscribers", audit(q), audit(f)],
    ]  # fmt: skip
    title = (f"Sustained run (P11): {a['duration']:,.0f} s per pipeline, {a['rate']:,} rows/s "
             f"offered, `retention.size_cap` {a['size_cap']} under backpressure, a fast and a "
             f"throttled subscriber; goal: data on disk flat under the cap "
             f"({'met' if sq['disk_max'] <= cap else 'missed'})")  # fmt: skip
    legacy = {"load average (1 min) at the start": d["load_avg"][0],
              "at the end": d["load_avg"][-1], "command": d.get("command")}  # fmt: skip
    return "\n\n".join(
        [
            header(title, d, legacy=legacy),
            table(["measure", "Quiver", "Parquet file pipeline, same settings"], rows),
        ]
    )


KINDS = [("GET", "GET"), ("HEAD", "HEAD"), ("LIST", "LIST"), ("PUT", "PUT"),
         ("CPUT", "conditional PUT"), ("COPY", "COPY"), ("POST", "POST"), ("DELETE", "DELETE")]  # fmt: skip
OPERATIONS = {
    "micro-batch: planning (streamWriter() on the driver)":
        "micro-batch, driver planning (`streamWriter()`)",
    "micro-batch: task (slot txn + WAL flush)": "micro-batch, write task (slot transaction + WAL flush)",
    "micro-batch: commit (streamWriter(), decision, orphans)":
        "micro-batch, driver commit (`streamWriter()`, decision, orphan sealing)",
    "micro-batch: maintenance tick that seals it (+ retention)":
        "micro-batch, the maintenance tick that seals its segment (+ its retention pass)",
    "subscriber: poll + read of the new segment": "subscriber: poll + read of the new segment",
    "subscriber: ack flush (Subscription.ack)": "subscriber: ack flush (`Subscription.ack`)",
    "idle trigger: Spark latestOffset (ack(start) + plan)":
        "idle trigger, Spark `latestOffset` (`ack(start)` + plan)",
    "idle trigger: Subscription.poll, nothing new": "idle `Subscription.poll`",
    "start: writer": "process start: writer open + first retention pass",
    "start: consumer": "process start: consumer open + first poll",
    "first ack of a restarted consumer": "the first ack of a restarted consumer",
    "start: quiver status (whole process)": "process start: `quiver status` (whole process)",
    "writer lease renewal (Lease.renew)": "writer lease renewal",
}  # fmt: skip


def kinds(counts: dict[str, float]) -> str:
    def n(v: float) -> str:
        return f"{v:g}" if float(v).is_integer() else f"{v:.2f}"

    return ", ".join(f"{n(counts[k])} {name}" for k, name in KINDS if counts.get(k)) or "none"


def requests_cell(name: str, op: Data) -> str:
    """An operation's requests: the typical repetition's, or for idle triggers (whose
    rate-limited passes fall into some calls only) the mean over every call."""
    totals = Counter(sum(r.values()) for r in op["all_reps"])
    if name.startswith("idle trigger") and len(totals) > 1:
        common = totals.most_common(1)[0][0]
        return (f"mean **{op['total']:.1f}** over {op['reps']} calls ({kinds(op['counts'])}); "
                f"{totals[common]} of them {common:g}, at most {max(totals):g}")  # fmt: skip
    text = f"**{op['total']:g}**: {kinds(op['counts'])}"
    if len(totals) > 1:
        text += f"; {min(totals):g} to {max(totals):g} over {op['reps']} repetitions"
    return text


def object_requests(d: Data) -> str:
    out = []
    if "operations" in d:
        ops, built = d["operations"], d["built"]
        order = [k for k in OPERATIONS if k in ops["small"]]
        order += [k for k in ops["small"] if k not in order]
        rows = []
        for name in order:
            a, b = ops["small"][name], ops["large"].get(name)
            cells = [requests_cell(name, op) if op else "-" for op in (a, b)]
            rows.append([OPERATIONS.get(name, name), cells[0],
                         "the same" if cells[0] == cells[1] else cells[1]])  # fmt: skip
        out.append(table(["operation", f"S3 requests, {num(built['small']['segments'])} "
                          "retained segments", f"{num(built['large']['segments'])} retained "
                          "segments"], rows))  # fmt: skip
    if "churn" in d:
        ch = d["churn"]
        keys = list(ch["operations"])
        rows = [[name, *[requests_cell(name, ch["operations"][k][name]) for k in keys]]
                for name in ch["operations"][keys[0]]]  # fmt: skip
        head = ["operation (S3 requests)"] + [
            f"{ch['built'][k]['layout']}, {num(ch['built'][k]['identities'])} executor identities "
            f"({num(ch['built'][k]['partitions'])} partitions)" for k in keys]  # fmt: skip
        out.append("Partition churn: stores that executor pods wrote, 4 at a time, each once, "
                   "exiting cleanly, drained by a subscriber; the slot pool vs host-named "
                   "partitions (one per pod, before the pool):\n\n" + table(head, rows))  # fmt: skip
    if "cost" in d:
        p = d["prices"]
        rows = [[name, num(c["requests"]), num(c["tier1"]), f"${c['usd']:.3f}"]
                for name, c in d["cost"]["rows"].items()]  # fmt: skip
        out.append(f"Per day, from the {num(d['built']['small']['segments'])}-segment store, at "
                   f"request prices as of {p['as_of']}: PUT, COPY, POST, LIST "
                   f"${p['tier1_per_1000']} per 1,000; GET, HEAD ${p['tier2_per_1000']} per 1,000; "
                   f"DELETE free; an idle writer measured over "
                   f"{num(d['idle_writer']['seconds'])} s:\n\n"
                   + table(["per day", "requests", "of which PUT/LIST class", "USD"], rows))  # fmt: skip
    if "latency" in d:
        lat = d["latency"]
        diff = lat["s3"]["p50_s"] - lat["local"]["p50_s"]
        limit = lat["trigger_s"] + 0.3
        rows = [[f"{k} root", ms(lat[k]["p50_s"]), ms(lat[k]["p99_s"]), num(lat[k]["n"])]
                for k in ("local", "s3")]  # fmt: skip
        out.append(f"Commit -> visible, {lat['trigger_s']:g} s trigger, "
                   f"`segment.max_open_duration={lat['max_open_duration_s']:g}s`, a commit every "
                   f"{lat['commit_every_s'] * 1e3:.0f} ms, {lat['rounds']} alternating rounds; goal: "
                   f"S3 p50 within one trigger + 300 ms of the local root "
                   f"({'met' if diff <= limit else 'missed'}):\n\n"
                   + table(["root", "p50", "p99", "commits"], rows))  # fmt: skip
    title = "A root on S3 (P13), moto on loopback, requests counted by a proxy in front of it"
    return header(title, d) + "\n\n" + "\n\n".join(out)


def catch_up(d: Data) -> str:
    r, c, g = d["results"], d["config"], d["goals"]
    old, new = r["oldest"], r["newest"]

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:,.2f} s"

    def lat(o: Data, key: str, q: str) -> str:
        return sec(o[key][q])

    def audit(o: Data) -> str:
        a = o["audit"]
        return (
            f"{num(a['doubled'])} doubled, {num(a['missing'])} missing of {num(a['rows_written'])}"
        )

    limit = c["trigger"] + 1.0
    caught = (
        new["catch_up_s"] / old["catch_up_s"] if new["catch_up_s"] and old["catch_up_s"] else None
    )
    rows = [
        ["rows written after the resume, delivered while the backlog drains: p50",
         lat(old, "fresh_latency_while_draining_s", "p50"),
         lat(new, "fresh_latency_while_draining_s", "p50"),
         goal(f"newest <= {limit:g} s (one trigger + 1 s)",
              g["fresh_p50_within_trigger_plus_1s"])],
        ["the same, p99", lat(old, "fresh_latency_while_draining_s", "p99"),
         lat(new, "fresh_latency_while_draining_s", "p99"), "-"],
        ["every row written after the resume: p50 / p99",
         f"{lat(old, 'fresh_latency_s', 'p50')} / {lat(old, 'fresh_latency_s', 'p99')}",
         f"{lat(new, 'fresh_latency_s', 'p50')} / {lat(new, 'fresh_latency_s', 'p99')}", "-"],
        ["time to catch up (no lag left: the backlog and what accrued meanwhile)",
         sec(old["catch_up_s"]), sec(new["catch_up_s"]) + (f" ({ratio(caught)})" if caught else ""),
         goal("newest <= 1.2x oldest", g["catch_up_at_most_1_2x_oldest"])],
        [f"time until the {num(old['backlog_rows'])} rows of the outage are delivered",
         sec(old["drain_s"]), sec(new["drain_s"]), "- (newest serves them last by design)"],
        ["rows delivered per second until both caught up",
         num(old["throughput_rows_per_s"] or 0), num(new["throughput_rows_per_s"] or 0), "-"],
        ["exactly-once audit", audit(old), audit(new), goal("none", g["audits_clean"])],
    ]  # fmt: skip
    head = [
        f"outage {c['outage']:g} s, a segment of {num(c['rows'])} rows every "
        f"{c['interval']:g} s, a trigger every {c['trigger']:g} s of at most "
        f"{c['max_segments']} segments",
        "oldest first",
        "newest first",
        "goal",
    ]
    title = "Catch-up after an outage, oldest first vs newest first (one run, side by side)"
    return "\n\n".join([header(title, d), table(head, rows)])


def one_protocol(d: Data) -> str:
    a, p, ops = d["acknowledgements"], d["publication"], d["operations"]
    sides = ("posix", "objects")

    def work(what: str) -> list[str]:
        return [f"{o.get('fsync', 0):g} fsync, {o.get('fsync_dir', 0):g} directory fsync"
                for o in (ops[s][what] for s in sides)]  # fmt: skip

    def rounds(xs: list[float]) -> str:
        return ", ".join(f"{x:.2f}" for x in xs)

    tenth = max(1, d["acks"] // 10)
    rows = [
        [f"acknowledgement: {num(d['acks'])} acks a round, each its own durable registry write "
         "(`record_many` of one seq, as a consumer's commit makes it)",
         *[f"{a['acks_per_s'][s]:,.0f} acks/s (p50 {a['ack_ms_p50'][s]:.2f} ms)" for s in sides],
         f"{ratio(a['ratio_time_objects_over_posix'], bold=True)} the time "
         f"(rounds {rounds(a['ratio_per_round'])})"],
        [f"the same, p50 of the first / last {num(tenth)} acks (context)",
         *[f"{a['ack_ms_p50_first_tenth'][s]:.2f} / {a['ack_ms_p50_last_tenth'][s]:.2f} ms"
           for s in sides], "-"],
        ["file-system work per ack (counting pass)", *work("per_ack"), "-"],
        [f"publication (`publish`, phase two): {num(d['publications'])} segments a round, p50",
         *[f"{p['publish_ms_p50'][s]:.2f} ms" for s in sides],
         f"{ratio(p['ratio_publish_objects_over_posix'], bold=True)} "
         f"(rounds {rounds(p['ratio_per_round'])})"],
        [f"whole segment write (`.arrow` + publication, {num(d['rows_per_segment'])} rows), p50 "
         "(context)", *[f"{p['write_ms_p50'][s]:.2f} ms" for s in sides],
         ratio(p["ratio_write_objects_over_posix"])],
        ["file-system work per publication (counting pass)", *work("per_publication"), "-"],
    ]  # fmt: skip
    fs = d["filesystem"]
    title = (f"One protocol for both roots (rejected, ARCHITECTURE.md §2.1): a POSIX root run "
             f"as a `LocalObjects` object root vs its own protocol, on one directory "
             f"({fs['type']}, real fsyncs), the two sides interleaved ack by ack and segment by "
             f"segment, median of {d['rounds']} rounds")  # fmt: skip
    head = ["what", "POSIX protocol (`FileJournal`, `FilePublication`)",
            "as an object root (`ObjectJournal`, `ManifestPublication` on `LocalObjects`)",
            "ratio, same run"]  # fmt: skip
    return "\n\n".join([header(title, d), table(head, rows)])


RENDER: dict[str, Callable[[Data], str]] = {
    "wal": wal,
    "segment": segment,
    "recovery": recovery,
    "acklog": acklog,
    "sink": sink,
    "source": source,
    "trigger": trigger,
    "startup": startup,
    "soak": soak,
    "object_requests": object_requests,
    "idle_poll": idle_poll,
    "catch_up": catch_up,
    "one_protocol": one_protocol,
}


def blocks(results: Path = RESULTS) -> dict[str, str]:
    """``name -> markdown`` for every result file; a result file no renderer knows is
    an error (its table would silently be missing)."""
    files = {p.stem: p for p in sorted(results.glob("*.json"))}
    unknown = sorted(set(files) - set(RENDER))
    if unknown:
        raise SystemExit(f"no table for {', '.join(f'bench/results/{n}.json' for n in unknown)}:"
                         f" add a renderer to bench/tables.py")  # fmt: skip
    return {n: RENDER[n](json.loads(files[n].read_text())) for n in RENDER if n in files}


def block_pattern(name: str) -> re.Pattern[str]:
    """A block: its start marker's line, its content (group 2; empty in a new block),
    its end marker on a line of its own."""
    return re.compile(rf"<!-- bench:{name} -->\n(?:(.*?)\n)??()<!-- /bench:{name} -->", re.S)


def block(text: str, name: str) -> str | None:
    """The content of README text's block ``name`` (``""`` if empty), ``None`` if absent."""
    m = block_pattern(name).search(text)
    return None if m is None else m.group(1) or ""


def replace_blocks(text: str, rendered: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with each block's content replaced; the names whose markers are missing."""
    missing = []
    for name, body in rendered.items():
        m = block_pattern(name).search(text)
        if m is None:
            missing.append(name)
            continue
        marker = f"<!-- bench:{name} -->\n"
        text = text[: m.start()] + marker + body + "\n" + text[m.start(2) :]
    return text, missing


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace README.md's blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md's blocks differ")
    args = ap.parse_args(argv)
    rendered = blocks()
    if not (args.write or args.check):
        for name, body in rendered.items():
            print(f"<!-- bench:{name} -->\n{body}\n<!-- /bench:{name} -->\n")
        return 0
    text = README.read_text(encoding="utf-8")
    new, missing = replace_blocks(text, rendered)
    if missing:
        print(f"README.md lacks the markers of {', '.join(missing)}: add "
              f"`<!-- bench:NAME -->` / `<!-- /bench:NAME -->` lines", file=sys.stderr)  # fmt: skip
        return 1
    if args.check:
        stale = [n for n, b in rendered.items() if replace_blocks(text, {n: b})[0] != text]
        if stale:
            print(f"README.md's tables {', '.join(stale)} differ from bench/results; "
                  f"regenerate them with `{COMMAND}`", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    if new != text:
        README.write_text(new, encoding="utf-8")
    print(f"README.md: {len(rendered)} benchmark tables from bench/results")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
