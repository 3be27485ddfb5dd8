"""What a POSIX root would pay run as a local object store (ARCHITECTURE.md §0, §2.1).

The rejected design: the object protocol as the only protocol, a POSIX root opened as
an object root on :class:`~quiver_spark.objects.local.LocalObjects`. On ONE directory
(``--dir``, a real disk: real fsyncs), side by side in one run, each round on fresh
subdirectories, the two sides interleaved A B B A ... ack by ack and segment by
segment (the disk of a shared machine changes its pace within seconds):

* acknowledgements: ``--acks`` consumer acknowledgements, each its own durable
  registry write as a consumer's commit makes one (``SubscriberRegistry.record_many``
  of one seq, :meth:`~quiver_spark.subscription.acknowledging.Acknowledgements.record`'s
  call), through the POSIX journal (``FileJournal``: a 32-byte record appended under
  ``flock``, ``fdatasync``) vs ``ObjectJournal`` on ``LocalObjects`` (one delta object
  created per ack, a CHECKPOINT replaced every 32 deltas; the consumer's live claim
  carried as an object root's consumer carries it);
* publications: ``--publications`` segments (1,000 rows each) written and published by
  a ``SegmentLocation`` wired as each root kind wires it: ``FileRoot`` (the ``.meta``
  is the publication, the MANIFEST index follows) vs ``ObjectRoot`` on ``LocalObjects``
  (``.arrow`` and ``.meta`` created if absent, the MANIFEST replaced at the writer's
  epoch is the publication). ``publish`` (phase two) is timed alone; the whole write
  (``.arrow`` + publish) is context.

A short counting pass (not timed) records the file-system operations per ack and per
publication of each side (fsync = ``fsync``/``fdatasync`` of a file, dir fsync of a
directory). Prints a markdown table and writes ``bench/results/one_protocol.json``.

    .venv/bin/python bench/bench_one_protocol.py [--dir /tmp] [--acks 2000]
        [--publications 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchdata import distinct_batches, run_ended, run_started

from quiver_spark import layout
from quiver_spark.control.manifest_store import ManifestStore
from quiver_spark.fs import DEFAULT_IO, FileIO
from quiver_spark.objects.local import LocalObjects
from quiver_spark.root_kind import FileRoot, ObjectRoot
from quiver_spark.segment.catalog import SegmentLocation
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscribers.journal import FileJournal
from quiver_spark.subscribers.live import LiveClaim
from quiver_spark.subscribers.objects_journal import ObjectJournal

SUB = "sub-0"
PART = "p-0"
ROWS_PER_SEGMENT = 1_000
SIDES = ("posix", "objects")
LABEL = {
    "posix": "POSIX protocol (FileJournal; FilePublication)",
    "objects": "one protocol: LocalObjects object root (ObjectJournal; ManifestPublication)",
}


class CountingIO(FileIO):
    """Counts every primitive file-system operation by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        self.ops[op] += 1


def filesystem_of(path: str) -> dict[str, str]:
    """The mount ``path`` is on: mount point, device, file-system type."""
    real = os.path.realpath(path)
    best = ("/", "?", "?")
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best[0]):
                best = (mnt, dev, fstype)
    return {"mount": best[0], "device": best[1], "type": best[2]}


# -- acknowledgements ----------------------------------------------------------------------
def open_registry(side: str, root: str, io: FileIO) -> tuple[SubscriberRegistry, LiveClaim | None]:
    """A registry on ``root`` with ``SUB`` registered, as each side's consumer has it."""
    if side == "posix":
        reg = SubscriberRegistry.open(root, io=io, journal=FileJournal)
        reg.register(SUB)
        return reg, None
    objects = LocalObjects(root, io=io)
    reg = SubscriberRegistry.open(root, io=io, objects=objects, journal=ObjectJournal)
    reg.register(SUB)
    claim = LiveClaim(token=0x5EED, url=os.path.join(root, "readers", f"{SUB}.lease"), epoch=1)
    reg.claim_consumer(SUB, claim)  # made once, before the consumer's first read
    return reg, claim


def run_acks(roots: dict[str, str], n: int) -> dict[str, list[float]]:
    """Seconds of each of ``n`` acknowledgements per side (seqs 1..n, one durable write
    each), the two sides' registries open at once and their acks interleaved A B B A ...
    so that the disk's moods fall on both alike."""
    opened = {s: open_registry(s, roots[s], DEFAULT_IO) for s in SIDES}
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    try:
        for seq in range(1, n + 1):
            for side in SIDES if seq % 2 else SIDES[::-1]:
                reg, claim = opened[side]
                t0 = time.perf_counter()
                reg.record_many(SUB, {PART: [seq]}, Outcome.ACK, consumer=claim)
                times[side].append(time.perf_counter() - t0)
        assert all(reg.hwm(SUB, PART) == n for reg, _ in opened.values())
    finally:
        for reg, _ in opened.values():
            reg.close()
    return times


# -- publications --------------------------------------------------------------------------
def open_location(side: str, root: str, io: FileIO) -> SegmentLocation:
    """The segment location of a store at ``root`` as its root kind wires it, opened
    for writing ``PART`` (the writer's open: the MANIFEST fenced / brought up to date)."""
    objects = LocalObjects(root, io=io)
    url = os.path.join(root, layout.segments_dir())
    kind = FileRoot if side == "posix" else ObjectRoot
    manifests = ManifestStore(objects, facts=kind.manifest_facts(objects))
    if side == "objects":
        manifests.claim(PART, 1)  # the writer's lease epoch
    location = kind.segment_location(url, objects, io=io, storage_options=None, manifests=manifests)
    pub = location.publication
    pub.manifest_at_open(PART, pub.fence(PART))
    return location


def run_publications(
    roots: dict[str, str], n: int, batch: Any
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds of each of ``n`` publications per side (phase two alone) and of each
    whole write, the sides interleaved A B B A ... segment by segment."""
    locations = {s: open_location(s, roots[s], DEFAULT_IO) for s in SIDES}
    publish: dict[str, list[float]] = {s: [] for s in SIDES}
    whole: dict[str, list[float]] = {s: [] for s in SIDES}
    for seq in range(1, n + 1):
        for side in SIDES if seq % 2 else SIDES[::-1]:
            location = locations[side]
            t0 = time.perf_counter()
            meta = location.write_data(PART, seq, [batch], min_ingestion_ns=seq,
                                       max_ingestion_ns=seq, wal_ranges=[(seq, seq)])  # fmt: skip
            t1 = time.perf_counter()
            location.publish(meta)
            t2 = time.perf_counter()
            publish[side].append(t2 - t1)
            whole[side].append(t2 - t0)
    for location in locations.values():
        assert location.published_seqs(PART) == list(range(1, n + 1))
    return publish, whole


# -- counting pass -------------------------------------------------------------------------
def per_op_counts(base: str, batch: Any, acks: int = 64, pubs: int = 16) -> dict[str, Any]:
    """File-system operations per ack and per publication of each side (steady state:
    the registry's open and the writer's open are not counted)."""
    out: dict[str, Any] = {}
    for side in SIDES:
        root = tempfile.mkdtemp(prefix=f"qbench-op-count-{side}-", dir=base)
        try:
            io = CountingIO()
            reg, claim = open_registry(side, os.path.join(root, "acks"), io)
            io.ops.clear()
            for seq in range(1, acks + 1):
                reg.record_many(SUB, {PART: [seq]}, Outcome.ACK, consumer=claim)
            reg.close()
            ack_ops = {k: round(v / acks, 2) for k, v in sorted(io.ops.items())}
            io = CountingIO()
            location = open_location(side, os.path.join(root, "pubs"), io)
            metas = []
            for seq in range(1, pubs + 1):
                metas.append(location.write_data(PART, seq, [batch], min_ingestion_ns=seq,
                                                  max_ingestion_ns=seq, wal_ranges=[(seq, seq)]))  # fmt: skip
            io.ops.clear()
            for meta in metas:
                location.publish(meta)
            pub_ops = {k: round(v / pubs, 2) for k, v in sorted(io.ops.items())}
        finally:
            shutil.rmtree(root, ignore_errors=True)
        out[side] = {"per_ack": ack_ops, "per_publication": pub_ops, "acks": acks,
                     "publications": pubs}  # fmt: skip
    return out


def syncs(ops: dict[str, float]) -> str:
    return f"{ops.get('fsync', 0):g} fsync + {ops.get('fsync_dir', 0):g} dir fsync"


# -- the run -------------------------------------------------------------------------------
def fresh(base: str, tag: str, work: Callable[[dict[str, str]], Any]) -> Any:
    """``work`` on a fresh subdirectory of ``base`` per side."""
    roots = {s: tempfile.mkdtemp(prefix=f"qbench-op-{tag}-{s}-", dir=base) for s in SIDES}
    try:
        return work(roots)
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="the POSIX directory measured (a disk, not tmpfs)")  # fmt: skip
    ap.add_argument("--acks", type=int, default=2000)
    ap.add_argument("--publications", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "one_protocol.json"))  # fmt: skip
    args = ap.parse_args()
    run = run_started()
    base = os.path.abspath(args.dir)
    fs = filesystem_of(base)
    print(f"directory {base} on {fs['device']} ({fs['type']}, mounted at {fs['mount']})",
          flush=True)  # fmt: skip
    batch = distinct_batches(1)[0].slice(0, ROWS_PER_SEGMENT)
    counts = per_op_counts(base, batch)

    ack_s: dict[str, list[float]] = {s: [] for s in SIDES}  # per round: total seconds
    ack_p50: dict[str, list[float]] = {s: [] for s in SIDES}
    ack_p99: dict[str, list[float]] = {s: [] for s in SIDES}
    ack_last: dict[str, list[float]] = {s: [] for s in SIDES}  # median of the last 10%
    ack_first: dict[str, list[float]] = {s: [] for s in SIDES}  # median of the first 10%
    pub_ms: dict[str, list[float]] = {s: [] for s in SIDES}  # per round: median ms
    pub_p99: dict[str, list[float]] = {s: [] for s in SIDES}
    write_ms: dict[str, list[float]] = {s: [] for s in SIDES}
    tenth = max(1, args.acks // 10)
    for r in range(args.rounds):
        times = fresh(base, "ack", lambda roots: run_acks(roots, args.acks))
        for side, t in times.items():
            ack_s[side].append(sum(t))
            ack_p50[side].append(statistics.median(t))
            ack_p99[side].append(statistics.quantiles(t, n=100)[98])
            ack_first[side].append(statistics.median(t[:tenth]))
            ack_last[side].append(statistics.median(t[-tenth:]))
        pub, whole = fresh(base, "pub", lambda roots: run_publications(
            roots, args.publications, batch))  # fmt: skip
        for side in SIDES:
            pub_ms[side].append(statistics.median(pub[side]) * 1e3)
            pub_p99[side].append(statistics.quantiles(pub[side], n=100)[98] * 1e3)
            write_ms[side].append(statistics.median(whole[side]) * 1e3)
        print(f"round {r + 1}: acks/s " + ", ".join(
            f"{s} {args.acks / ack_s[s][-1]:,.0f}" for s in SIDES) + "; publish ms " + ", ".join(
            f"{s} {pub_ms[s][-1]:.2f}" for s in SIDES)
            + f"; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip

    med = statistics.median
    acks_per_s = {s: args.acks / med(ack_s[s]) for s in SIDES}
    ack_ratio_rounds = [b / a for a, b in zip(ack_s["posix"], ack_s["objects"], strict=True)]
    pub_ratio_rounds = [b / a for a, b in zip(pub_ms["posix"], pub_ms["objects"], strict=True)]
    write_ratio_rounds = [b / a for a, b in zip(write_ms["posix"], write_ms["objects"],
                                                strict=True)]  # fmt: skip
    r2 = lambda xs: [round(x, 3) for x in xs]  # noqa: E731
    result = {
        "benchmark": "one protocol: a POSIX root run as a local object store",
        "directory": base,
        "filesystem": fs,
        "acks": args.acks,
        "publications": args.publications,
        "rows_per_segment": ROWS_PER_SEGMENT,
        "rounds": args.rounds,
        "sides": LABEL,
        "acknowledgements": {
            "acks_per_s": {s: round(acks_per_s[s], 1) for s in SIDES},
            "ratio_time_objects_over_posix": round(med(ack_ratio_rounds), 2),
            "ratio_per_round": r2(ack_ratio_rounds),
            "total_s_per_round": {s: r2(ack_s[s]) for s in SIDES},
            "ack_ms_p50": {s: round(med(ack_p50[s]) * 1e3, 3) for s in SIDES},
            "ack_ms_p99": {s: round(med(ack_p99[s]) * 1e3, 3) for s in SIDES},
            "ack_ms_p50_first_tenth": {s: round(med(ack_first[s]) * 1e3, 3) for s in SIDES},
            "ack_ms_p50_last_tenth": {s: round(med(ack_last[s]) * 1e3, 3) for s in SIDES},
        },
        "publication": {
            "publish_ms_p50": {s: round(med(pub_ms[s]), 3) for s in SIDES},
            "publish_ms_p99": {s: round(med(pub_p99[s]), 3) for s in SIDES},
            "ratio_publish_objects_over_posix": round(med(pub_ratio_rounds), 2),
            "ratio_per_round": r2(pub_ratio_rounds),
            "publish_ms_p50_per_round": {s: r2(pub_ms[s]) for s in SIDES},
            "write_ms_p50": {s: round(med(write_ms[s]), 3) for s in SIDES},
            "ratio_write_objects_over_posix": round(med(write_ratio_rounds), 2),
        },
        "operations": counts,
        "run": run_ended(run),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)

    a, p, c = result["acknowledgements"], result["publication"], counts
    print(f"\nOne protocol vs two: {args.acks:,} acks and {args.publications:,} publications "
          f"per side a round, interleaved ack by ack and segment by segment, median of {args.rounds} rounds, {fs['type']} at "
          f"{base}\n")  # fmt: skip
    print("| what | POSIX protocol (today) | POSIX root as a LocalObjects object root "
          "(rejected) | ratio |")  # fmt: skip
    print("|---|---|---|---|")
    print(f"| acknowledgement, one durable registry write each | "
          f"{acks_per_s['posix']:,.0f} acks/s (p50 {a['ack_ms_p50']['posix']:.2f} ms) | "
          f"{acks_per_s['objects']:,.0f} acks/s (p50 {a['ack_ms_p50']['objects']:.2f} ms) | "
          f"**{a['ratio_time_objects_over_posix']:.2f}x** the time |")  # fmt: skip
    print(f"| the same, p50 of the first / last {tenth:,} acks | "
          f"{a['ack_ms_p50_first_tenth']['posix']:.2f} / {a['ack_ms_p50_last_tenth']['posix']:.2f}"
          f" ms | {a['ack_ms_p50_first_tenth']['objects']:.2f} / "
          f"{a['ack_ms_p50_last_tenth']['objects']:.2f} ms | - |")  # fmt: skip
    print(f"| file-system work per ack | {syncs(c['posix']['per_ack'])} | "
          f"{syncs(c['objects']['per_ack'])} | - |")  # fmt: skip
    print(f"| publication (`publish`: phase two), p50 | {p['publish_ms_p50']['posix']:.2f} ms | "
          f"{p['publish_ms_p50']['objects']:.2f} ms | "
          f"**{p['ratio_publish_objects_over_posix']:.2f}x** |")  # fmt: skip
    print(f"| whole segment write (`.arrow` + publish, {ROWS_PER_SEGMENT:,} rows), p50 | "
          f"{p['write_ms_p50']['posix']:.2f} ms | {p['write_ms_p50']['objects']:.2f} ms | "
          f"{p['ratio_write_objects_over_posix']:.2f}x |")  # fmt: skip
    print(f"| file-system work per publication | {syncs(c['posix']['per_publication'])} | "
          f"{syncs(c['objects']['per_publication'])} | - |")  # fmt: skip
    print(
        f"\nack time ratio per round: {', '.join(f'{x:.2f}' for x in ack_ratio_rounds)}; "
        f"publish ratio per round: {', '.join(f'{x:.2f}' for x in pub_ratio_rounds)}"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
