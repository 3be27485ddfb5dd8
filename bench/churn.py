"""Executor churn for the benchmarks' partition-churn rows: a store that ``identities``
executor pods wrote, ``concurrent`` at a time, each once, with a subscriber that read
and acknowledged everything (its segments deleted: the data drained).

Each pod is simulated in this process the way ``bench_slot_churn.py``'s executor is a
pod: its own host name and node (``lease._me`` patched while it acts), its own empty
WAL directory. It claims a slot as the Spark sink's worker does
(:meth:`QuiverStore.open_slot`), writes one transaction (durable, staged), the driver
commits the wave (:meth:`QuiverStore.commit_batch`), and the pod exits cleanly (its
slot sealed and released). Layouts:

- ``pool``: ``open_slot`` on an object root: slot ``w-<k>`` of the shared pool (the
  partitions stay as many as pods wrote at once);
- ``host-named``: a partition per pod, as before the pool: ``open_slot`` on a POSIX
  root (``<host>-<k>``, what a POSIX root still does), ``<host>-0`` on an object root.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from quiver_spark import QuiverStore, StoreConfig, WalConfig
from quiver_spark.config import NAME_RE, SegmentConfig
from quiver_spark.control import lease as lease_mod
from quiver_spark.objects import open_objects
from quiver_spark.subscription import Subscription
from quiver_spark.urls import object_scheme

APP = "query-1"
SCHEMA = pa.schema([("id", pa.int64())])
ROWS = 10


@contextmanager
def as_pod(host: str) -> Iterator[None]:
    """This process acts as pod ``host`` (another machine: its own host name and node)."""
    pid = os.getpid()
    ident = lease_mod._Identity(host, pid, lease_mod._start_time(pid), "node-" + host)
    real = lease_mod._me
    lease_mod._me = lambda: ident  # type: ignore[assignment]
    try:
        yield
    finally:
        lease_mod._me = real  # type: ignore[assignment]


def churn(
    root: str,
    identities: int,
    layout: str,
    wal_dir: Path,
    *,
    opts: dict[str, str] | None = None,
    concurrent: int = 4,
    subscriber: str = "exporter",
    config: StoreConfig | None = None,
) -> dict[str, Any]:
    """Make the store at ``root`` (``layout``: ``pool`` or ``host-named``) and run
    ``identities`` pods through it, ``concurrent`` at a time; ``subscriber`` (registered
    first) reads and acknowledges everything after each wave, and its ack log is
    checkpointed at the end. Returns what was built."""
    t0 = time.perf_counter()
    on_objects = object_scheme(root) is not None
    if layout not in ("pool", "host-named"):
        raise ValueError(layout)
    base = config or StoreConfig()

    # a POSIX root keeps its WALs in the root (its STORE records where)
    def wal(name: str) -> WalConfig:
        return WalConfig(path=str(wal_dir / name)) if on_objects else WalConfig()

    driver = StoreConfig(wal=wal("driver"))
    store_id = QuiverStore.prepare_writes(root, driver, SCHEMA, storage_options=opts)
    sub = Subscription.open(root, subscriber, storage_options=opts)
    sub.start("earliest")
    rows = version = 0
    try:
        for first in range(0, identities, concurrent):
            hosts = [f"pod-{n:05d}" for n in range(first, min(identities, first + concurrent))]
            version += 1
            stores: dict[str, QuiverStore] = {}
            winners: list[tuple[str, int]] = []
            for host in hosts:
                cfg = StoreConfig(
                    wal=dataclasses.replace(wal(host), flush_interval_s=0),
                    segment=SegmentConfig(max_open_duration_s=3600),
                    retention=base.retention,
                )
                with as_pod(host):
                    if layout == "pool" or not on_objects:
                        s = QuiverStore.open_slot(
                            root, cfg, host=host, storage_options=opts, background=False
                        )
                    else:
                        s = QuiverStore.open(
                            root, cfg, partition=f"{host}-0", storage_options=opts,
                            background=False,
                        )  # fmt: skip
                    t = s.begin_txn(APP, version)
                    s.append(pa.record_batch({"id": pa.array(range(ROWS), pa.int64())}), txn_id=t)
                    s.flush()
                    s.stage_txn(t)
                stores[host] = s
                winners.append((s.writer.pid, t))
            decided = QuiverStore.commit_batch(
                root, driver, APP, version, winners, ROWS * len(winners), store_id=store_id,
                storage_options=opts,
            )  # fmt: skip
            assert decided.seal_error is None, decided.seal_error
            for host, s in stores.items():
                with as_pod(host):
                    s.close()  # a clean exit: sealed, released
            while (batch := sub.poll()) is not None:
                rows += sum(b.num_rows for m in batch.segments for b in sub.read(m))
                sub.ack(batch.end)
        # what a long-lived store holds: a checkpoint and a short ack log (the log
        # checkpoints itself every so many records; the 4-pod store's would not yet)
        sub.registry.checkpoint()
    finally:
        sub.close()
    assert rows == ROWS * identities, f"read {rows} of {ROWS * identities} rows"
    return {
        "identities": identities,
        "layout": layout,
        "concurrent": concurrent,
        "partitions": partitions(root, opts),
        "rows_read": rows,
        "build_s": time.perf_counter() - t0,
    }


def partitions(root: str, opts: dict[str, str] | None = None) -> int:
    """Partitions the root holds anything of (a lease, a MANIFEST, a segment)."""
    objects = open_objects(root, opts)
    found = {*objects.list_dirs("partitions/"), *objects.list_dirs("segments/")}
    return sum(1 for n in found if NAME_RE.fullmatch(n))  # not segments/~hints/


def copy_objects(src: str, dst: str, opts: dict[str, str] | None = None) -> int:
    """Every object under root ``src`` put under root ``dst`` (a churned store built on
    memory:// taken to a bucket: its keys and bodies as the same pods would have left
    them there, built in seconds instead of an HTTP round trip per request)."""
    from concurrent.futures import ThreadPoolExecutor

    a, b = open_objects(src), open_objects(dst, opts)
    infos = a.list("")

    def one(key: str) -> None:
        got = a.get(key)
        assert got is not None, key
        b.put(key, got.data)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, [i.key for i in infos]))
    return len(infos)
