"""How many partitions a store on an object root holds after executors that each wrote
once (ARCHITECTURE.md §8.2, "Slots"), against moto's S3 server on loopback.

Each executor is a process of its own standing for a Kubernetes pod: its own host name
and kernel (no other process takes its lease for a dead process of its host), its own
empty WAL disk. It claims a core slot as the Spark sink's worker does, writes one
transaction (durable, staged), the driver (this process) commits it, and the executor
ends; the next one starts after it. Then a subscriber reads everything and ``gc`` runs,
while a second subscriber, registered from the start, has read nothing (its segments
are retained). For each way executors end: the partitions in the bucket (those with any
object, ``partitions/`` or ``segments/``) and those with segments (what every reader
lists, and HEADs the MANIFEST of, at each poll):

- ``exit``: the worker exits cleanly (its slot sealed and released);
- ``killed; next after ttl``: killed; the next starts once its lease is a ttl old by the
  storage's clock;
- ``killed; next at once``: killed; the next starts at once (every lower slot's lease
  is still fresh: each executor mints a number, the bound's slack);
- ``host-named (before)``: slot ``<host>-0`` per executor, as before the pool.

    .venv/bin/python bench/bench_slot_churn.py [--executors 20] [--ttl 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from quiver_spark import QuiverStore, StoreConfig, WalConfig
from quiver_spark.objects import open_objects
from quiver_spark.subscription import Subscription
from tests.moto_server import moto_server, s3_options

EXECUTOR = r"""
import json, os, signal, sys
import pyarrow as pa
from quiver_spark import QuiverStore, StoreConfig, WalConfig, SegmentConfig
from quiver_spark.control import lease as lease_mod

root, host, wal, ttl, mode, version = sys.argv[1:7]
opts = json.loads(sys.argv[7])
ident = lease_mod._Identity(host, os.getpid(), lease_mod._start_time(os.getpid()), "node-" + host)
lease_mod._me = lambda: ident
config = StoreConfig(
    wal=WalConfig(path=wal, flush_interval_s=0),
    segment=SegmentConfig(max_open_duration_s=3600),
    lease_ttl_s=float(ttl),
)
if mode == "host-named (before)":
    store = QuiverStore.open(root, config, partition=host + "-0", storage_options=opts)
else:
    store = QuiverStore.open_slot(root, config, host=host, storage_options=opts)
t = store.begin_txn("query-1", int(version))
store.append(pa.record_batch({"id": pa.array(range(10), pa.int64())}), txn_id=t)
store.flush()
store.stage_txn(t)
print(json.dumps([store.writer.pid, t]), flush=True)
sys.stdin.readline()  # the driver committed
if mode.startswith("killed"):
    os.kill(os.getpid(), signal.SIGKILL)
store.close()
"""

MODES = ("exit", "killed; next after ttl", "killed; next at once", "host-named (before)")
SCHEMA = pa.schema([("id", pa.int64())])


def run_mode(mode: str, endpoint: str, executors: int, ttl: float, tmp: Path) -> dict[str, int]:
    opts = {k: str(v) for k, v in s3_options(endpoint).items()}
    root = f"s3://qbucket/churn-{uuid.uuid4().hex[:8]}"
    config = StoreConfig(wal=WalConfig(path=str(tmp / f"driver-{mode}")), lease_ttl_s=ttl)
    store_id = QuiverStore.prepare_writes(root, config, SCHEMA, storage_options=opts)
    sub = Subscription.open(root, "exporter", storage_options=opts)
    sub.start("earliest")
    lagging = Subscription.open(root, "lagging", storage_options=opts)
    lagging.start("earliest")
    lagging.close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for n in range(executors):
        host = f"pod-{uuid.uuid4().hex[:6]}"
        wal = str(tmp / f"{mode}-{host}")
        args = [root, host, wal, str(ttl), mode, str(n + 1), json.dumps(opts)]
        proc = subprocess.Popen(
            [sys.executable, "-c", EXECUTOR, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        slot, txn = json.loads(proc.stdout.readline())
        QuiverStore.commit_batch(
            root, config, "query-1", n + 1, [(slot, txn)], 10, store_id=store_id,
            storage_options=opts,
        )  # fmt: skip
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(60)
        if mode == "killed; next after ttl":
            time.sleep(ttl + 2.0 + 1.5)  # the storage's clock: ttl + its resolution + S3's seconds
    # the subscriber reads everything (sealing what killed executors left once their
    # leases are seen unrenewed for the ttl), then gc
    rows, deadline = 0, time.monotonic() + 60
    while rows < 10 * executors and time.monotonic() < deadline:
        while (batch := sub.poll()) is not None:
            rows += sum(b.num_rows for m in batch.segments for b in sub.read(m))
            sub.ack(batch.end)
        time.sleep(0.5)
    sub.close()
    gc = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "gc", root,
         *[a for k, v in opts.items() for a in ("-S", f"{k}={v}")]],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    objects = open_objects(root, opts)
    with QuiverStore.open(root, partition=None, create=False, storage_options=opts) as store:
        with_segments = len(store.partitions())
    return {
        "rows read": rows,
        "partitions": len({*objects.list_dirs("partitions/"), *objects.list_dirs("segments/")}),
        "partitions with segments (retained for a lagging subscriber)": with_segments,
        "gc exit": gc.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", type=int, default=20)
    parser.add_argument("--ttl", type=float, default=2.0, help="lease.ttl in seconds")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    args = parser.parse_args()
    with moto_server() as endpoint, TemporaryDirectory() as tmp:
        print(f"{args.executors} executors, one after another, each writing once; "
              f"lease.ttl {args.ttl:g}s")  # fmt: skip
        for mode in args.modes.split(","):
            out = run_mode(mode, endpoint, args.executors, args.ttl, Path(tmp))
            print(f"{mode:23s} " + ", ".join(f"{k} {v}" for k, v in out.items()), flush=True)


if __name__ == "__main__":
    main()
