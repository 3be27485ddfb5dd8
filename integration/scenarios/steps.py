"""One step of a user-visible scenario, run as a process of its own.

Usage: ``python -m integration.scenarios.steps STEP 'JSON ARGS'``

Each step drives the public engine API (:class:`quiver_spark.QuiverStore`) the way an
application or the Spark sink does, and reports on stdout, one JSON object a line:

- ``{"event": "ready", ...}``: the step reached the point where its scenario kills it;
  it then waits for that SIGKILL and never exits by itself;
- ``{"event": "done", ...}``: the step finished by itself (exit code 0).

Anything unexpected exits non-zero with the traceback on stderr. Rows are
``{"k": int64, "v": string}`` with distinct keys, so a reader can tell every row
apart and count it.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from quiver_spark import QuiverStore, RetentionConfig, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.fs import FileIO

GiB = 1024**3


def emit(event: str, **info: Any) -> None:
    print(json.dumps({"event": event, **info}), flush=True)


def hold(**info: Any) -> None:
    """Report ``ready`` and wait for the scenario's SIGKILL."""
    emit("ready", **info)
    while True:
        time.sleep(3600)


def make_config(c: dict[str, Any] | None) -> StoreConfig:
    c = c or {}
    return StoreConfig(
        wal=WalConfig(
            flush_interval_s=c.get("flush_interval_s", 0.025),
            max_size_bytes=c.get("wal_max_size", 4 * GiB),
            path=c.get("wal_path"),
        ),
        segment=SegmentConfig(
            target_size_bytes=c.get("target_size", 32 * 1024 * 1024),
            max_open_duration_s=c.get("max_open_s", 5.0),
            path=c.get("segments_path"),
        ),
        retention=RetentionConfig(backpressure_timeout_s=c.get("backpressure_timeout_s", 30.0)),
    )


def rows(keys: Iterable[int], *, nullable: bool = True, width: int = 8) -> pa.RecordBatch:
    """A batch of the given keys; ``nullable`` is the nullability of both fields."""
    ks = list(keys)
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=nullable),
            pa.field("v", pa.string(), nullable=nullable),
        ]
    )
    return pa.record_batch(
        [pa.array(ks, pa.int64()), pa.array([f"{k:0{width}d}" for k in ks], pa.string())],
        schema=schema,
    )


# -- steps ---------------------------------------------------------------------------------


def write(a: dict[str, Any]) -> None:
    """Append and finalize ``segments`` segments of ``rows`` keys each, from ``first``.

    ``mode``: ``close`` closes the store and reports ``done``; ``kill`` reports
    ``ready`` right after the last finalize (the partition STATE still names that
    segment as being published) and waits for SIGKILL.
    """
    store = QuiverStore.open(
        a["root"], make_config(a.get("config")), partition=a.get("partition", "p-0"),
        background=False,
    )  # fmt: skip
    seqs, k = [], a["first"]
    for _ in range(a["segments"]):
        store.append(rows(range(k, k + a["rows"])))
        store.flush()
        k += a["rows"]
        meta = store.finalize()
        assert meta is not None
        seqs.append(meta.seq)
    if a.get("mode", "close") == "kill":
        hold(seqs=seqs)
    store.close()
    emit("done", seqs=seqs)


def append_only(a: dict[str, Any]) -> None:
    """Append ``batches`` acknowledged batches of ``rows`` keys, never sealed; wait for SIGKILL."""
    store = QuiverStore.open(
        a["root"], make_config({"max_open_s": 3600}), partition=a["partition"], background=False
    )
    k = a["first"]
    for _ in range(a["batches"]):
        store.append(rows(range(k, k + a["rows"])))
        store.flush()
        k += a["rows"]
    hold(wal=sorted(os.listdir(os.path.join(a["root"], "partitions", a["partition"], "wal"))))


def nullable_plain(a: dict[str, Any]) -> None:
    """Scenario 1: non-null [1,2,3], then the same column nullable [10,11], flush."""
    config = make_config({"max_open_s": 3600})
    store = QuiverStore.open(a["root"], config, partition="p-0")
    store.append(rows([1, 2, 3], nullable=False))
    store.append(rows([10, 11], nullable=True))
    store.flush()
    hold()


def nullable_txn(a: dict[str, Any]) -> None:
    """Scenario 1 with transactions, as the sink writes them.

    Batch of app A (non-null schema) committed, batch of app B (nullable) committed,
    with ``pin`` a transaction of app C begun after B's data and left undecided, then
    one maintenance tick.
    """
    config = make_config({"max_open_s": 3600})
    store = QuiverStore.open(a["root"], config, partition="p-0", background=False)
    ta = store.begin_txn("appA", 0, "0.0.1")
    store.append(rows([1, 2, 3], nullable=False), txn_id=ta)
    store.flush()
    assert store.commit_txn("appA", 0, [("p-0", ta)], rows=3)
    tb = store.begin_txn("appB", 0, "0.0.2")
    store.append(rows([10, 11], nullable=True), txn_id=tb)
    store.flush()
    tc = None
    if a.get("pin"):
        tc = store.begin_txn("appC", 0, "0.0.3")
        store.append(rows([100, 101], nullable=True), txn_id=tc)
        store.flush()
    assert store.commit_txn("appB", 0, [("p-0", tb)], rows=2)
    store.maintain()
    hold(txn_a=ta, txn_b=tb, txn_c=tc)


def big_txn(a: dict[str, Any]) -> None:
    """Scenario 2: a task's transaction several times ``segment.target_size``, flushed."""
    config = make_config({"target_size": a["target_size"], "max_open_s": 3600})
    store = QuiverStore.open(a["root"], config, partition="p-0")
    txn = store.begin_txn(a["app"], a["version"], "0.0.1")
    n, nbytes = a["rows_per_batch"], 0
    for i in range(a["batches"]):
        batch = rows(range(i * n, (i + 1) * n), width=40)
        nbytes += batch.nbytes
        store.append(batch, txn_id=txn)
    store.flush()  # acknowledged: the task would now return its commit message
    hold(txn_id=txn, rows=n * a["batches"], bytes=nbytes)


def commit(a: dict[str, Any]) -> None:
    """The driver's part of a batch: the commit decision, then (optionally) sealing
    the partitions whose writer is gone, as the sink's commit does."""
    store = QuiverStore.open(
        a["root"], make_config(a.get("config")), partition=None, create=False, background=False
    )
    won = store.commit_txn(a["app"], a["version"], [tuple(w) for w in a["winners"]], a["rows"])
    sealed = store.finalize_idle_partitions() if a.get("finalize_idle") else []
    store.close()
    emit("done", won=won, sealed=[list(s) for s in sealed])


class _DieBetweenMetaAndArrow(FileIO):
    """Kill this process (SIGKILL) when a ``.arrow`` is about to be unlinked after a
    ``.meta`` was: a retention pass dying between the two halves of a deletion."""

    def __init__(self) -> None:
        super().__init__()
        self.metas: list[str] = []

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if op == "unlink" and path.endswith(".meta"):
            self.metas.append(path)
        elif op == "unlink" and path.endswith(".arrow") and self.metas:
            emit("ready", unlinked=self.metas, next=path)
            os.kill(os.getpid(), signal.SIGKILL)


def retention_dies_mid_delete(a: dict[str, Any]) -> None:
    """Scenario 6: one retention pass, killed between unlinking .meta and .arrow."""
    io = _DieBetweenMetaAndArrow()
    store = QuiverStore.open(
        a["root"], make_config(a.get("config")), partition=None, create=False, io=io,
        background=False,
    )  # fmt: skip
    result = store.run_retention()
    store.close()
    emit("done", deleted={p: list(s) for p, s in result.deleted.items()})


class _SegmentStoreDown(FileIO):
    """Every create under the segments directory fails with ENOSPC (the WAL is fine)."""

    def __init__(self, segments_dir: str) -> None:
        super().__init__()
        self.segments_dir = segments_dir.rstrip(os.sep)

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        inside = path == self.segments_dir or path.startswith(self.segments_dir + os.sep)
        if inside and op in ("open", "mkdir", "rename"):
            raise OSError(errno.ENOSPC, "No space left on device (segment storage)", path)


def append_while_segments_fail(a: dict[str, Any]) -> None:
    """Scenario 6: an append whose record is durable (flush_interval 0) while sealing
    segments fails. The caller treats an exception as "not written" and retries once,
    as a task retry would."""
    root = a["root"]
    io = _SegmentStoreDown(os.path.join(root, "segments"))
    config = make_config({"flush_interval_s": 0.0, "target_size": 1, "max_open_s": 3600})
    store = QuiverStore.open(root, config, partition="p-0", io=io, background=False)
    outcomes: list[str] = []
    for _attempt in range(2):
        try:
            store.append(rows([1, 2, 3]))
            outcomes.append("ok")
            break
        except Exception as e:
            outcomes.append(f"{type(e).__name__}: {e}")
    try:
        store.flush()
        flushed = "ok"
    except Exception as e:
        flushed = f"{type(e).__name__}: {e}"
    hold(outcomes=outcomes, flush=flushed)


def oversized_batch(a: dict[str, Any]) -> None:
    """Scenario 6: acknowledged [1,2,3], then one batch larger than ``wal.max_size``."""
    config = make_config(
        {"wal_max_size": a["wal_max_size"], "backpressure_timeout_s": a["backpressure_timeout_s"]}
    )
    store = QuiverStore.open(a["root"], config, partition="p-0", background=False)
    store.append(rows([1, 2, 3]))
    store.flush()
    big = rows(range(100, 100 + a["rows"]), width=40)
    t0 = time.monotonic()
    error: str | None = None
    retryable = None
    try:
        store.append(big)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        retryable = getattr(e, "retryable", None)
    emit(
        "done", error=error, retryable=retryable, elapsed_s=time.monotonic() - t0,
        batch_bytes=big.nbytes, limit=config.wal.max_size_bytes,
    )  # fmt: skip
    os._exit(0)  # the process ends without closing the store


def segments_path_mismatch(a: dict[str, Any]) -> None:
    """Scenario 6: a writer configured with another ``segment.path`` than the store's."""
    config = make_config({"segments_path": a["segments_path"]})
    try:
        store = QuiverStore.open(a["root"], config, partition="p-0", create=False, background=False)
    except Exception as e:
        emit("done", refused=True, error=f"{type(e).__name__}: {e}")
        return
    store.append(rows([7, 8, 9]))
    store.flush()
    meta = store.finalize()
    store.close()
    emit("done", refused=False, segments_url=store.segments_url, seq=meta.seq if meta else None)


def _race_worker(root: str, name: str, versions: int, barrier: Any, out: str) -> None:
    store = QuiverStore.open(root, partition=None, create=False, background=False)
    results: list[Any] = []
    for v in range(versions):
        barrier.wait(timeout=60)
        try:
            won = store.commit_txn("race", v, [(name, v)], rows=1)
            rec = store.commits.get("race", v)
            winners = sorted([p, t] for p, t in rec.winners) if rec is not None else None
            results.append({"won": won, "winners": winners})
        except Exception as e:
            results.append({"error": f"{type(e).__name__}: {e}"})
    with open(out, "w") as f:
        json.dump(results, f)
    os._exit(0)


def commit_race(a: dict[str, Any]) -> None:
    """Scenario 6: two processes commit each (app, version) at the same moment."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    names = ["committer-a", "committer-b"]
    outs = {n: os.path.join(a["out_dir"], f"{n}.json") for n in names}
    procs = [
        ctx.Process(target=_race_worker, args=(a["root"], n, a["versions"], barrier, outs[n]))
        for n in names
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    codes = [p.exitcode for p in procs]
    assert codes == [0, 0], f"committers exited with {codes}"
    results = {}
    for n in names:
        with open(outs[n]) as f:
            results[n] = json.load(f)
    emit("done", results=results)


STEPS: dict[str, Callable[[dict[str, Any]], None]] = {
    f.__name__: f
    for f in (
        write,
        append_only,
        nullable_plain,
        nullable_txn,
        big_txn,
        commit,
        retention_dies_mid_delete,
        append_while_segments_fail,
        oversized_batch,
        segments_path_mismatch,
        commit_race,
    )
}


def main(argv: list[str]) -> None:
    step, args = argv[1], json.loads(argv[2]) if len(argv) > 2 else {}
    STEPS[step](args)


if __name__ == "__main__":
    main(sys.argv)
