"""A lost machine loses no committed row: the store's root on S3, each worker a machine.

A standalone cluster on 127.0.0.1 whose two workers are two machines
(``StandaloneCluster(isolated_workers=True)``): each runs in its own mount and UTS
namespace (``unshare --mount --uts``), with host name ``w1``/``w2`` and a private
tmpfs holding its work dir, Spark local dirs, ``XDG_CACHE_HOME`` (where the WAL of an
object root lives by default) and ``TMPDIR``. What the machines share is the network:
moto's S3 server (the store's root ``s3://bucket/store``), the driver (on the host,
with the Spark checkpoints) and the subscribers' Parquet output (the downstream
system the audit reads). The test first proves the separation: each executor reports
its machine's host name, and a WAL file an executor wrote is visible neither from the
other machine nor from the host.

``jobs/pipeline.py`` runs a producer (one core on each machine; segments kept open:
``segment.max_open_duration`` 10 minutes) and two subscribers. Once the producer has
committed some micro-batches, machine ``w1`` is lost: its worker, executor and Python
workers are killed by SIGKILL at once and its disk is gone. Then the driver is killed
(kill -9), a replacement machine ``w3`` joins, and the driver restarts from its
checkpoints (what it writes from then on is sealed after 2 s, so the end of the input
is readable without waiting ten minutes) and finishes the input. Every key reaches each
subscriber exactly once, including the rows the driver had committed on the lost
machine, and the segments both subscribers acknowledged are reclaimed from the bucket.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration.audit import delivered
from integration.harness import FreshVenv, StandaloneCluster, moto_s3, processes_under
from integration.scenario import (
    SINK_OPTIONS,
    SUBSCRIBERS,
    Pipeline,
    assert_exactly_once,
    assert_loopback_only,
    audit_run,
    report,
)

ROWS_PER_BATCH = 1000
TOTAL = 12_000
BATCHES_BEFORE_LOSS = 3
OPEN_FOR = "10m"
AFTER_RESTART_OPEN_FOR = "2s"
READABLE_WITHIN_S = 150.0
"""How long after the loss every row committed before it may take to be readable:
the lost writer's lease (30 s) and the next passes, with margin for the restart."""


def _client(endpoint: str, secret: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="quiver-test",
                        aws_secret_access_key=secret, region_name="us-east-1")  # fmt: skip


def decisions(store: str, storage: dict[str, str]) -> dict[int, frozenset[tuple[str, int]]]:
    """The sink's commit decisions in the bucket: batch id -> winning ``(partition, txn)``."""
    from quiver_spark.commits import CommitLog
    from quiver_spark.objects import open_objects

    objects = open_objects(store, storage)
    log = CommitLog(objects)
    out: dict[int, frozenset[tuple[str, int]]] = {}
    for key in (o.key for o in objects.list("commits/")):
        _, app, name = key.split("/")
        record = log.get(app, int(name.split(".")[0]))
        if record is not None:
            out[record.version] = record.winners
    return out


def segments_of(store: str, storage: dict[str, str], host: str) -> int:
    """How many segments partitions of machine ``host`` have published in the bucket."""
    from quiver_spark import QuiverStore

    with QuiverStore.open(store, partition=None, create=False, background=False,
                          storage_options=storage) as qs:  # fmt: skip
        return sum(m.partition.startswith(f"{host}-") for m in qs.segments())


def _keys(out: Path) -> set[int]:
    return set(pc.cast(delivered(out, ("key",))["key"], pa.int64()).to_pylist())


def _wal_partitions(files: list[Path]) -> set[str]:
    """Partition names of WAL files ``.../quiver-spark/wal/<root digest>/<pid>/wal/<file>``."""
    return {f.parts[-3] for f in files if f.parts[-2] == "wal" and "quiver-spark" in f.parts}


def _probe_hosts(run: Pipeline) -> set[str]:
    probes = [e for e in run.read_events() if e["event"] == "probe"]
    return {host for host, *_ in probes[-1]["executors"]} if probes else set()


def assert_machines_are_separate(
    cluster: StandaloneCluster, run: Pipeline
) -> dict[str, list[Path]]:
    """Each executor runs on its machine (host name), and what it writes on its disk
    is seen neither by the other machine nor by the host. Returns each machine's WAL
    files."""
    hosts = _probe_hosts(run)
    assert hosts == {"w1", "w2"}, f"executors report host names {hosts}, expected w1 and w2"
    disk = cluster.machine_dir
    assert not any(disk.iterdir()), f"the host sees files on the machines' disk: {disk}"
    partitions: dict[str, set[str]] = {}
    files: dict[str, list[Path]] = {}
    for name in ("w1", "w2"):
        me = cluster.machines[name]
        other = cluster.machines["w2" if name == "w1" else "w1"]
        assert me.hostname() == name
        unfound = set(me.pids()) - set(processes_under(cluster.root.parent))
        assert not unfound, f"processes of {name} the teardown would not find: {unfound}"
        wal = files[name] = [f for f in me.files(disk / "cache") if "wal" in f.parts]
        partitions[name] = _wal_partitions(wal)
        assert partitions[name] and all(p.startswith(f"{name}-") for p in partitions[name]), (
            f"machine {name} holds WAL partitions {partitions[name]}"
        )
        for f in wal:
            assert not f.exists(), f"{f}, written on {name}, is visible from the host"
            assert not other.path(f).exists(), f"{f}, written on {name}, is visible on {other.name}"
    print(f"[machines] host names {sorted(hosts)}; WAL partitions {partitions}; host disk empty")
    return files


@pytest.mark.soak
@pytest.mark.timeout(1500)
def test_rows_committed_on_a_lost_machine_reach_every_subscriber_exactly_once(
    java: str, fresh_venv: FreshVenv, integration_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    del java
    t_start = time.monotonic()
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    base = integration_root / f"machine-loss-{uuid.uuid4().hex[:6]}"
    secret = "quiver-secret-" + uuid.uuid4().hex[:8]
    with moto_s3() as endpoint:
        bucket = f"quiver-{uuid.uuid4().hex[:12]}"
        _client(endpoint, secret).create_bucket(Bucket=bucket)
        storage = {"aws_endpoint": endpoint, "aws_access_key_id": "quiver-test",
                   "aws_secret_access_key": secret, "aws_region": "us-east-1",
                   "aws_allow_http": "true"}  # fmt: skip
        cluster = StandaloneCluster(fresh_venv, base / "cluster", isolated_workers=True)
        run: Pipeline | None = None
        try:
            cluster.start()
            print(f"[machines] cluster with machines {sorted(cluster.machines)} up "
                  f"in {time.monotonic() - t_start:.0f}s")  # fmt: skip
            sink = {**SINK_OPTIONS, "segment.max_open_duration": OPEN_FOR,
                    "segment.target_size": "64MB"}  # fmt: skip
            run = Pipeline(
                fresh_venv, cluster.master_url, cluster, base / "run", total=TOTAL,
                rows_per_batch=ROWS_PER_BATCH, sink_options=sink,
                store_url=f"s3://{bucket}/store", storage_options=storage,
                env={"XDG_CACHE_HOME": str(base / "driver-cache")},
            )  # fmt: skip
            run.driver.conf.update({
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s",
                "spark.executor.extraJavaOptions":
                    f"-Djava.io.tmpdir={cluster.machine_dir / 'tmp'} -XX:-UsePerfData",
            })  # fmt: skip
            run.start_driver()
            run.wait_until(
                lambda: run.committed_batches() >= BATCHES_BEFORE_LOSS,  # type: ignore[union-attr]
                f"{BATCHES_BEFORE_LOSS} committed producer batches",
                420,
            )
            assert_loopback_only(cluster)
            wal_files = assert_machines_are_separate(cluster, run)

            # -- the loss ----------------------------------------------------------
            store = f"s3://{bucket}/store"
            assert segments_of(store, storage, "w1") == 0, "w1's rows should be in open segments"
            checkpointed = run.committed_batches()
            t_loss = time.monotonic()
            run.lose_machine("w1")
            run.kill_driver()
            decided = decisions(store, storage)  # the driver is gone: nothing more is decided
            on_w1 = sorted(v for v, w in decided.items() if any(p.startswith("w1-") for p, _ in w))
            before = min(TOTAL, len(decided) * ROWS_PER_BATCH)
            assert sorted(decided) == list(range(len(decided))), sorted(decided)
            print(f"[machine-loss] rows committed before the loss: {before} (batches decided "
                  f"in the bucket {sorted(decided)}, {on_w1} with a winner on w1; Spark "
                  f"checkpoint commits {checkpointed}); segments of w1 in the bucket: 0")  # fmt: skip
            w3 = cluster.start_machine("w3")
            cluster.wait_alive(2)
            assert w3.hostname() == "w3" and not any(w3.path(f).exists() for f in wal_files["w1"])
            run.driver.args = [
                f"segment.max_open_duration={AFTER_RESTART_OPEN_FOR}"
                if a == f"segment.max_open_duration={OPEN_FOR}" else a
                for a in run.driver.args
            ]  # fmt: skip
            run.start_driver()

            # -- recovery ------------------------------------------------------------
            wanted = set(range(before))
            readable_after: float | None = None
            done_at: float | None = None
            while not run.complete():
                run.check_alive()
                now = time.monotonic()
                got = {name: _keys(run.out(name)) for name in SUBSCRIBERS}
                if readable_after is None and all(wanted <= k for k in got.values()):
                    readable_after = now - t_loss
                if done_at is None and any(e["event"] == "producer_done"
                                           for e in run.read_events()):  # fmt: skip
                    done_at = now
                if done_at is not None and now > max(t_loss + READABLE_WITHIN_S, done_at + 60):
                    break  # the input is finished and caught up: what is missing stays so
                assert now < t_loss + 900, f"the input did not finish\n{run.diagnostics()}"
                time.sleep(2)
            got = {name: _keys(run.out(name)) for name in SUBSCRIBERS}
            if readable_after is None and all(wanted <= k for k in got.values()):
                readable_after = time.monotonic() - t_loss
            assert _probe_hosts(run) == {"w2", "w3"}, _probe_hosts(run)
            recovered = {name: len(wanted & k) for name, k in got.items()}
            lost_by_batch: dict[int, int] = {}
            for k in sorted(set(range(TOTAL)) - got["fast"]):
                lost_by_batch[k // ROWS_PER_BATCH] = lost_by_batch.get(k // ROWS_PER_BATCH, 0) + 1
            print(f"[machine-loss] keys missing at the fast subscriber by batch: {lost_by_batch}; "
                  f"segments of w1 in the bucket now: {segments_of(store, storage, 'w1')}")  # fmt: skip
            readable = f"{readable_after:.0f}s" if readable_after is not None else (
                f"not within {time.monotonic() - t_loss:.0f}s")  # fmt: skip
            print(f"[machine-loss] rows committed before the loss {before}; recovered "
                  f"{recovered}; loss to readable: {readable}; delivered {run.rows()} "
                  f"of {TOTAL}")  # fmt: skip
            run.stop_file.write_text("stop\n")
            code = run.driver.wait(180)
            assert code == 0, f"driver exit code {code}\n{run.diagnostics()}"
        finally:
            if run is not None:
                run.driver.stop()
            survivors = cluster.stop()
            assert not survivors, f"processes survived the cluster teardown: {survivors}"
        print(f"[machine-loss] one run took {time.monotonic() - t_start:.0f}s")
        audits, reclaim = audit_run(run)
        print(report(run, audits, reclaim))
        assert all(n == len(wanted) for n in recovered.values()), (
            f"rows the sink committed before machine w1 was lost are lost: of {len(wanted)} "
            f"committed, delivered {recovered}; missing by batch {lost_by_batch} "
            f"(batches with a winner on w1: {on_w1}); {audits['fast'].line()}"
        )
        assert_exactly_once(run)
