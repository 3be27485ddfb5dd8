"""P6 (ack part): open/replay time of the subscriber registry with 1M ack records.

Builds a store whose ``subscribers/`` directory holds 1,000,000 ack records (4
subscribers x 8 partitions, in-order acks with 1% out of order), written with the same
encoder the registry uses, then times ``SubscriberRegistry.open`` (median of 3):

* ``log``: all 1M records in the log, no checkpoint;
* ``checkpoint+tail``: a checkpoint covering 900k records plus a 100k-record tail
  (the default ``ack_checkpoint_records`` bound).

Prints a markdown table and writes ``bench/results/acklog.json``. Budget: <= 1 s.

    .venv/bin/python bench/bench_acklog.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

from benchdata import run_ended, run_started

from quiver_spark.subscribers import StartPosition, SubscriberRegistry
from quiver_spark.subscribers import log as acklog

SUBS = 4
PARTS = 8
BUDGET_S = 1.0


def build(root: str, records: int) -> None:
    reg = SubscriberRegistry.open(root, checkpoint_records=10**12)
    parts = [f"p-{i}" for i in range(PARTS)]
    for s in range(SUBS):
        reg.register(f"sub-{s}", start=StartPosition.EARLIEST, retained={p: [1] for p in parts})
    cur = reg._cursor
    assert cur is not None
    sids = [reg.state.by_name[f"sub-{s}"] for s in range(SUBS)]
    pids = [reg.state.part_ids[p] for p in parts]
    per = records // (SUBS * PARTS)
    enc = acklog.RecordEncoder(cur.running)
    path = os.path.join(reg.dir, acklog.log_file_name(cur.gen))
    with open(path, "ab") as f:
        for i in range(per):
            seq = i + 1
            if i % 100 == 1:  # 1% out of order: swap with the next one
                seq = i + 2
            elif i % 100 == 2:
                seq = i
            for sid in sids:
                for pid in pids:
                    enc.add(acklog.K_OUTCOME, acklog.OUT_ACK, sub=sid, part=pid, a=seq, b=1)
            if len(enc.parts) > 100_000:
                f.write(enc.data())
                enc.parts.clear()
        f.write(enc.data())
    reg.close()


def time_open(root: str, runs: int = 3) -> tuple[float, float, int]:
    times = []
    cpu = []
    n = 0
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        reg = SubscriberRegistry.open(root, checkpoint_records=10**12)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        n = reg.report.records_replayed
        assert reg.hwm("sub-0", "p-0") > 0
        reg.close()
    return statistics.median(times), statistics.median(cpu), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "acklog.json")
    )
    args = ap.parse_args()
    run = run_started()
    root = tempfile.mkdtemp(prefix="qbench-acklog-")
    rows = []
    try:
        build(root, args.records)
        size = sum(
            os.path.getsize(os.path.join(root, "subscribers", n))
            for n in os.listdir(os.path.join(root, "subscribers"))
        )
        t, c, n = time_open(root)
        rows.append(
            {
                "case": "log",
                "records_replayed": n,
                "log_bytes": size,
                "open_ms": round(t * 1000, 1),
                "cpu_ms": round(c * 1000, 1),
            }
        )
        # checkpoint + tail: checkpoint everything, then append a 10% tail
        shutil.rmtree(root)
        os.mkdir(root)
        build(root, args.records * 9 // 10)
        reg = SubscriberRegistry.open(root, checkpoint_records=10**12)
        reg.checkpoint()
        reg.close()
        tail_root = tempfile.mkdtemp(prefix="qbench-acklog-tail-")
        build(tail_root, args.records // 10)
        # graft the tail's records (same ids: same registration order) after the checkpoint
        src = [n for n in os.listdir(os.path.join(tail_root, "subscribers")) if n.endswith(".log")]
        with open(os.path.join(tail_root, "subscribers", src[0]), "rb") as f:
            raw = f.read()[acklog.ACK_HEADER_SIZE :]
        reg = SubscriberRegistry.open(root, checkpoint_records=10**12)
        cur = reg._cursor
        assert cur is not None
        enc = acklog.RecordEncoder(cur.running)
        for off in range(0, len(raw), acklog.RECORD_SIZE):
            fields = acklog.RECORD.unpack_from(raw, off)
            if fields[0] == acklog.K_OUTCOME:
                enc.add(*fields)
        with open(os.path.join(reg.dir, acklog.log_file_name(cur.gen)), "ab") as f:
            f.write(enc.data())
        reg.close()
        shutil.rmtree(tail_root)
        t, c, n = time_open(root)
        rows.append(
            {
                "case": "checkpoint+tail",
                "records_replayed": n,
                "records_total": args.records,
                "open_ms": round(t * 1000, 1),
                "cpu_ms": round(c * 1000, 1),
            }
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ok = all(r["open_ms"] <= BUDGET_S * 1000 for r in rows)
    run = run_ended(run)
    result = {
        "benchmark": "P6 ack log open/replay",
        "records": args.records,
        "subscribers": SUBS,
        "partitions": PARTS,
        "budget_ms": BUDGET_S * 1000,
        "pass": ok,
        "run": run,
        "platform": platform.platform(),
        "rows": rows,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"P6 ack log: {args.records:,} ack records, {SUBS} subscribers x {PARTS} partitions\n")
    print("| case | records replayed | open wall (median of 3) | open CPU | budget |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['records_replayed']:,} | {r['open_ms']} ms | "
            f"{r['cpu_ms']} ms | {BUDGET_S * 1000:.0f} ms |"
        )
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\n{'PASS' if ok else 'FAIL'}; written to {args.out}")


if __name__ == "__main__":
    main()
