"""A Spark worker paused past its slot's lease ttl, whose lease another holder took over
meanwhile, writes the next batches through a slot claimed afresh: no task fails on the
stale slot and every row is in the bucket exactly once (ARCHITECTURE.md §10, §8.2).

The store is in moto's S3 with the store option ``lease.ttl`` short. After a first run
of the query, the Python workers holding the store's slots are stopped (SIGSTOP), the
test process takes each slot's writer lease over once it has watched it unrenewed for
its ttl (as the driver's observer or another claimant does) and lets it go, and the
workers are continued; then the query runs again from its checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.control.lease import HolderInfo, Lease, current_holder
from quiver_spark.objects import ObjectStore, open_objects
from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, write_input_files

__all__ = ["moto_s3"]

TTL_S = 2.0
OPTIONS = {**FAST, "lease.ttl": f"{TTL_S:g}s"}
TASKS = 6  # per batch: enough to pass through every idle Python worker of the session


def run(spark: Any, src: str, url: str, storage: dict[str, Any], ckpt: str) -> Any:
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    writer = df.repartition(TASKS).writeStream.format("quiver")
    for k, v in {**OPTIONS, **{f"storage.{k}": str(v) for k, v in storage.items()}}.items():
        writer = writer.option(k, v)
    q = writer.option("checkpointLocation", ckpt).trigger(availableNow=True).start(url)
    assert q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    return q


def published(url: str, storage: dict[str, Any]) -> pa.Table:
    """The rows of the published segments (nothing sealed or taken over to read them)."""
    with QuiverStore.open(
        url, partition=None, create=False, background=False, storage_options=storage
    ) as store:
        schema = store.schema()
        assert schema is not None
        return pa.Table.from_batches(list(store.scan()), schema=schema)


def wait_published(url: str, storage: dict[str, Any], rows: int) -> pa.Table:
    deadline = time.monotonic() + 60
    while (table := published(url, storage)).num_rows < rows and time.monotonic() < deadline:
        time.sleep(0.2)
    return table


def slot_holders(objects: ObjectStore) -> dict[str, HolderInfo]:
    """Lease key -> its holder, for every slot lease held now."""
    keys = [i.key for i in objects.list("partitions/") if i.key.endswith("/LEASE")]
    return {k: h for k in keys if (h := current_holder(objects, k)) is not None}


def a_python_worker_of_this_host(holder: HolderInfo) -> bool:
    if holder.host != socket.gethostname():
        return False
    try:
        with open(f"/proc/{holder.pid}/cmdline", "rb") as f:
            return b"pyspark" in f.read()
    except OSError:
        return False


def failed_tasks(spark: Any, run_id: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job in tracker.getJobIdsForGroup(run_id):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else []:
            s = tracker.getStageInfo(stage)
            failed += s.numFailedTasks if s is not None else 0
    return failed


@pytest.mark.usefixtures("observed_leases_forgotten")
def test_a_paused_worker_whose_slot_was_taken_over_writes_the_next_batches_exactly_once(
    spark: Any, tmp_path: Any, moto_s3: MotoS3
) -> None:
    url, storage = f"{moto_s3.url}/{unique_prefix('paused')}/store", dict(moto_s3.options)
    src, ckpt = str(tmp_path / "in"), str(tmp_path / "ckpt")
    keys = write_input_files(src, 2, 30)
    run(spark, src, url, storage, ckpt)
    assert_exactly_once(wait_published(url, storage, 60), keys)

    objects = open_objects(url, storage)
    holders = slot_holders(objects)
    paused = {k: h.pid for k, h in holders.items() if a_python_worker_of_this_host(h)}
    assert paused, f"no slot held by a Python worker of this host: {holders}"
    for pid in set(paused.values()):
        os.kill(pid, signal.SIGSTOP)
    try:
        for key in paused:
            Lease.acquire(
                objects, key, purpose="writer", ttl_s=TTL_S, wait_s=3 * TTL_S + 10
            ).release()
    finally:
        for pid in set(paused.values()):
            os.kill(pid, signal.SIGCONT)

    keys += write_input_files(src, 2, 30, start=60)
    q = run(spark, src, url, storage, ckpt)
    assert failed_tasks(spark, str(q.runId)) == 0, "a task failed on a slot taken over"
    assert_exactly_once(wait_published(url, storage, 120), keys)
    again = {h.pid for h in slot_holders(objects).values()}
    assert again & set(paused.values()), (
        f"no paused worker wrote again (holders now {again}, paused {paused})"
    )
