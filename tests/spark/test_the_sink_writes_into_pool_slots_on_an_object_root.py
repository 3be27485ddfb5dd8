"""Through the Spark sink, a store on an object root is written into the slot pool
``w-0``, ``w-1``, ... (ARCHITECTURE.md §8.2, "Slots"), never into partitions named
after the executor's host: the Python workers that die are replaced by new ones that
take the slots the dead left (here at once: a dead process of this host), so after a
second run of the query whose workers were killed first the store holds no more
partitions than Python workers ran at once (the session's cores; one more if a
claimant met a slot the driver held for a moment to seal a dead worker's WAL), and
every row is in the bucket exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from typing import Any

import pyarrow as pa

from quiver_spark import QuiverStore
from quiver_spark.config import NAME_RE
from quiver_spark.control.lease import current_holder
from quiver_spark.objects import open_objects
from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, key_counts, write_input_files

__all__ = ["moto_s3"]

TASKS = 6


def run(spark: Any, src: str, url: str, storage: dict[str, Any], ckpt: str) -> None:
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    writer = df.repartition(TASKS).writeStream.format("quiver")
    for k, v in {**FAST, **{f"storage.{k}": str(v) for k, v in storage.items()}}.items():
        writer = writer.option(k, v)
    q = writer.option("checkpointLocation", ckpt).trigger(availableNow=True).start(url)
    assert q.awaitTermination(180)
    assert q.exception() is None, q.exception()


def stored(url: str, storage: dict[str, Any]) -> pa.Table:
    with QuiverStore.open(
        url, partition=None, create=False, background=False, storage_options=storage
    ) as store:
        store.finalize_idle_partitions()
        schema = store.schema()
        assert schema is not None
        return pa.Table.from_batches(list(store.scan()), schema=schema)


def partitions(url: str, storage: dict[str, Any]) -> list[str]:
    objects = open_objects(url, storage)
    found = {*objects.list_dirs("partitions/"), *objects.list_dirs("segments/")}
    return sorted(n for n in found if NAME_RE.fullmatch(n))  # not segments/~hints/


def slot_workers(url: str, storage: dict[str, Any]) -> set[int]:
    """The pids of this host's Python workers holding a slot of the store now."""
    objects = open_objects(url, storage)
    pids = set()
    for slot in objects.list_dirs("partitions/"):
        holder = current_holder(objects, f"partitions/{slot}/LEASE")
        if holder is None or holder.host != socket.gethostname():
            continue
        try:
            with open(f"/proc/{holder.pid}/cmdline", "rb") as f:
                if b"pyspark" in f.read():
                    pids.add(holder.pid)
        except OSError:
            continue
    return pids


def test_the_sink_writes_into_slots_named_from_the_pool_and_new_workers_take_over_dead_ones(
    spark: Any, tmp_path: Any, moto_s3: MotoS3
) -> None:
    url, storage = f"{moto_s3.url}/{unique_prefix('pool')}/store", dict(moto_s3.options)
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    keys = write_input_files(src, 2, 30)
    run(spark, src, url, storage, ckpt)
    first = partitions(url, storage)
    assert first and all(re.fullmatch(r"w-\d+", p) for p in first), first
    assert not [p for p in first if p.startswith(socket.gethostname())]

    dead = slot_workers(url, storage)
    assert dead, "no Python worker of this host holds a slot"
    for pid in dead:
        os.kill(pid, signal.SIGKILL)

    keys += write_input_files(src, 2, 30, start=60)
    run(spark, src, url, storage, ckpt)
    # committed rows a live worker still holds open are readable once it finalizes
    # them (segment.max_open_duration, then one publication): never a row twice meanwhile
    deadline = time.monotonic() + 60
    while True:
        table = stored(url, storage)
        counts = key_counts(table, "k")
        assert all(n == 1 for n in counts.values()), "a key read twice"
        if set(keys) <= set(counts) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert_exactly_once(table, keys)
    again = partitions(url, storage)
    cores = spark.sparkContext.defaultParallelism
    assert set(first) <= set(again) and len(again) <= cores + 1, (first, again)
    assert all(re.fullmatch(r"w-\d+", p) for p in again), again
    assert not slot_workers(url, storage) & dead
