"""P6 (WAL part; README "Benchmarks"): recovery time of a partition whose WAL is full.

A writer process fills one partition's WAL with 10k-row Arrow batches inside an
undecided transaction (so nothing can be finalized or truncated: the worst case,
the whole WAL must be scanned, verified and replayed), flushes, and is killed
with SIGKILL. Then fresh processes time ``QuiverStore.open`` (recovery) three
times; the median is reported. The ack-log half of P6 is bench_acklog.py.

Size: ``QUIVER_BENCH_WAL_MB`` (default 4090: a full default WAL, whose ``wal.max_size``
is 4096 MiB; one more batch would hit the cap and wait for space).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchdata import run_ended, run_started

RESULTS = Path(__file__).resolve().parent / "results"
WAL_MB = int(os.environ.get("QUIVER_BENCH_WAL_MB", "4090"))

FILL = textwrap.dedent(
    """
    import sys, pyarrow as pa
    from quiver_spark import QuiverStore, StoreConfig
    root, target = sys.argv[1], int(sys.argv[2])
    n = 10_000
    batch = pa.record_batch({
        "id": pa.array(range(n), type=pa.int64()),
        "ts": pa.array(range(n), type=pa.timestamp("us", tz="UTC")),
        "s": pa.array(["x" * 50] * n),
        "v": pa.array([1.5] * n),
    })
    store = QuiverStore.open(root, StoreConfig(), background=False)
    txn = store.begin_txn("bench", 0, "fill")
    while store.writer.wal.total_bytes < target:
        store.append(batch, txn_id=txn)
    store.flush()
    print(store.writer.wal.total_bytes, flush=True)
    sys.stdin.read()
    """
)

OPEN = textwrap.dedent(
    """
    import sys, time
    t0 = time.perf_counter()
    from quiver_spark import QuiverStore
    t1 = time.perf_counter()
    s = QuiverStore.open(sys.argv[1], background=False)
    t2 = time.perf_counter()
    rep = s.recovery
    s.close()
    print(t2 - t1, rep.records_scanned, rep.pending_txns)
    """
)


def main() -> None:
    run = run_started()
    with tempfile.TemporaryDirectory(dir=os.environ.get("QUIVER_BENCH_DIR")) as d:
        root = os.path.join(d, "store")
        proc = subprocess.Popen(
            [sys.executable, "-c", FILL, root, str(WAL_MB * 1024 * 1024)],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        wal_bytes = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        times, scanned = [], 0
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", OPEN, root], capture_output=True, text=True, check=True
            ).stdout.split()
            times.append(float(out[0]))
            scanned = int(out[1])
    med = statistics.median(times)
    row = {
        "id": "P6-wal",
        "run": run_ended(run),
        "wal_bytes": wal_bytes,
        "records": scanned,
        "open_s_median": med,
        "open_s_all": times,
        "goal_s": 1.0,
        "gb_per_s": wal_bytes / med / 1e9,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "recovery.json").write_text(json.dumps(row, indent=2))
    print("| # | what | WAL | records | open (median of 3) | scan rate | goal |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| P6 | open after kill -9, WAL full of undecided records | {wal_bytes / 2**20:.0f} MiB "
        f"| {scanned} | {med * 1000:.0f} ms | {row['gb_per_s']:.2f} GB/s "
        f"| <= 1 s {'(met)' if med <= 1.0 else '(missed)'} |"
    )


if __name__ == "__main__":
    main()
