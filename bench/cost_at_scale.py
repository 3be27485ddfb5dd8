"""Requests per second and dollars per day of a bucket-rooted store at a cluster's
scale, computed from the per-operation request counts P13 measured
(bench/results/object_requests.json, written by bench/bench_object_requests.py).

Nothing here is measured: it multiplies measured counts by how often each operation
runs at the given scale. The rules (docs/kubernetes.md states them beside the result):

- the sink runs one micro-batch per ``--trigger`` seconds: one planning and one commit
  on the driver, one task per writer slot (``--executors`` x ``--cores`` slots, each
  task with rows); each slot seals one segment per ``--max-open`` seconds
  (``segment.max_open_duration``), and each seal is one measured maintenance tick
  (publication + the retention pass after it);
- each of ``--subscribers`` subscribers triggers every ``--trigger`` seconds, every
  trigger finds the segments sealed since the last one (one poll + read and one ack
  flush, as measured);
- writer slots and live consumers renew their lease every 10 s (one conditional PUT);
- scaling: P13's store had :data:`PARTITIONS_MEASURED` partitions, so requests on one
  partition's MANIFEST that a pass sends for every partition (``HEAD
  partitions/<pid>/MANIFEST``: before publication hints served retention, every pass
  asked each partition; a poll asks only the partitions its hint listing names, which
  at this scale is about every partition a trigger) are scaled to the number of
  partitions (one per slot), but for the one a seal's publication sends to its own
  partition's MANIFEST; the per-segment requests of a poll (the MANIFEST GET of a
  changed partition, the segment's ``.meta`` and ``.arrow`` GETs) are scaled to the
  segments each trigger finds;
- what P13 could not see, since its other partitions were idle: a writer's retention
  pass after its seal learns every segment the other slots sealed since its previous
  pass (``--max-open`` seconds earlier: at this scale each other slot sealed once), one
  GET of that partition's MANIFEST each, whose entries give the segment's size and
  times (no ``.meta`` GET on an object root; a subscription's pass after its
  acknowledgement finds them in what its poll read). The ``.meta`` of a segment a
  pass deletes is read when it is checked before deletion, one GET where a pass that
  had read it sends one HEAD: the same count and price, inside the measured passes.
  Everything else counts as measured, per operation.

Run: ``.venv/bin/python bench/cost_at_scale.py [--executors 50 --cores 4
--subscribers 3 --trigger 1 --max-open 5] [--results PATH] [--json]``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "object_requests.json"
TIER1 = {"PUT", "CPUT", "COPY", "POST", "LIST"}
FREE = {"DELETE"}
MANIFEST_HEAD = "HEAD partitions/<pid>/MANIFEST"
PER_SEGMENT = (
    "GET partitions/<pid>/MANIFEST",
    "GET segments/<pid>/<n>.arrow",
    "GET segments/<pid>/<n>.meta",
)
LEASE_RENEWALS_PER_S = 1 / 10  # a lease of ttl 30 s is renewed every third of it
PARTITIONS_MEASURED = 5
"""The partitions of P13's store while it measured a micro-batch: ``p-0`` ... ``p-3``
(``bench_object_requests.PARTITIONS``) and the sink slot's own."""
OTHERS_SEALED = ("GET partitions/<pid>/MANIFEST",)
"""What a writer's pass reads of each segment another slot sealed since its last pass:
that partition's MANIFEST, whose entry stands for the segment's ``.meta``."""


def kind(key: str) -> str:
    return key.split(" ", 1)[0]


def scaled(
    by_key: dict[str, float],
    partitions_measured: int,
    partitions: int,
    segments: float,
    own_heads: float = 0.0,
) -> Counter[str]:
    """Requests by kind of one operation at the given scale (see the module's rules);
    ``own_heads`` of its MANIFEST HEADs are on its own partition (not scaled)."""
    out: Counter[str] = Counter()
    for key, n in by_key.items():
        if key == MANIFEST_HEAD:
            own = min(n, own_heads)
            n = own + (n - own) / partitions_measured * partitions
        elif key in PER_SEGMENT:
            n = n * segments
        out[kind(key)] += n
    return out


def add(total: Counter[str], part: Counter[str], times: float) -> None:
    for k, v in part.items():
        total[k] += v * times


def compute(args: argparse.Namespace) -> dict[str, Any]:
    doc = json.loads(Path(getattr(args, "results", None) or RESULTS).read_text())
    ops = doc["operations"]["small"]
    prices = doc["prices"]
    partitions_measured = PARTITIONS_MEASURED
    slots = args.executors * args.cores
    seals_per_s = slots / args.max_open
    segments_per_trigger = seals_per_s * args.trigger

    def op(name: str, segments: float = 1.0, own_heads: float = 0.0) -> Counter[str]:
        return scaled(ops[name]["by_key"], partitions_measured, slots, segments, own_heads)

    sink: Counter[str] = Counter()
    add(sink, op("micro-batch: planning (streamWriter() on the driver)"), 1 / args.trigger)
    add(sink, op("micro-batch: task (slot txn + WAL flush)"), slots / args.trigger)
    add(sink, op("micro-batch: commit (streamWriter(), decision, orphans)"), 1 / args.trigger)
    # the seal's publication asks its own partition's MANIFEST once
    add(
        sink,
        op("micro-batch: maintenance tick that seals it (+ retention)", own_heads=1),
        seals_per_s,
    )
    # each pass after a seal: the segments the other slots sealed since the previous one
    others = max(0.0, min(slots, seals_per_s * args.max_open) - 1)
    for key in OTHERS_SEALED:
        sink[kind(key)] += others * seals_per_s
    sink["CPUT"] += slots * LEASE_RENEWALS_PER_S
    subs: Counter[str] = Counter()
    per_trigger: Counter[str] = Counter()
    add(per_trigger, op("subscriber: poll + read of the new segment", segments_per_trigger), 1)
    add(per_trigger, op("subscriber: ack flush (Subscription.ack)"), 1)
    add(subs, per_trigger, args.subscribers / args.trigger)
    subs["CPUT"] += args.subscribers * LEASE_RENEWALS_PER_S

    def priced(c: Counter[str]) -> dict[str, Any]:
        t1 = sum(v for k, v in c.items() if k in TIER1)
        t2 = sum(v for k, v in c.items() if k not in TIER1 and k not in FREE)
        usd_day = (t1 * prices["tier1_per_1000"] + t2 * prices["tier2_per_1000"]) / 1000 * 86400
        return {
            "per_s": round(sum(c.values()), 1),
            "tier1_per_s": round(t1, 1),
            "tier2_per_s": round(t2, 1),
            "usd_per_day": round(usd_day, 2),
            "by_kind_per_s": {k: round(v, 1) for k, v in sorted(c.items()) if v},
        }

    whole = sink + subs
    return {
        "scale": {
            "executors": args.executors,
            "cores": args.cores,
            "slots": slots,
            "subscribers": args.subscribers,
            "trigger_s": args.trigger,
            "max_open_s": args.max_open,
            "segments_sealed_per_s": seals_per_s,
            "partitions_measured": partitions_measured,
            "others_sealed_per_pass": others,
        },
        "prices": prices,
        "measured": {"run": doc["run"]["date"], "commit": doc["run"]["commit"]},
        "sink": priced(sink),
        "subscribers": priced(subs),
        "total": priced(whole),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executors", type=int, default=50)
    ap.add_argument("--cores", type=int, default=4)
    ap.add_argument("--subscribers", type=int, default=3)
    ap.add_argument("--trigger", type=float, default=1.0)
    ap.add_argument("--max-open", type=float, default=5.0)
    ap.add_argument("--results", help=f"P13's results (default {RESULTS})")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = compute(args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("| | requests/s | of which PUT/LIST/POST | GET/HEAD | $/day |")
    print("|---|---|---|---|---|")
    for name in ("sink", "subscribers", "total"):
        r = out[name]
        print(
            f"| {name} | {r['per_s']:,.0f} | {r['tier1_per_s']:,.0f} | {r['tier2_per_s']:,.0f} "
            f"| {r['usd_per_day']:,.2f} |"
        )
    for name in ("sink", "subscribers"):
        print(f"{name}: {out[name]['by_kind_per_s']}")


if __name__ == "__main__":
    main()
