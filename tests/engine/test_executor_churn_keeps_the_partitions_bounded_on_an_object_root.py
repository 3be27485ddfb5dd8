"""Executors that come and go leave a store on an object root with about as many
partitions as ever wrote at once, and every committed row is read exactly once
(ARCHITECTURE.md §8.2 "Slots", §10.2, §16.2), with real processes on S3 (moto).

Each writer is a process standing for an executor pod: its own host name, its own
kernel (a lease of it is never "a dead process of this host" to another), its own
empty WAL disk. It claims a core slot as the Spark sink's worker does
(:meth:`QuiverStore.open_slot`) and writes transactions the way the sink's tasks do
(durable, staged, reported); the test is the driver, which commits each batch
(:meth:`QuiverStore.commit_batch`, which also seals for lost machines). A subscriber in a
process of its own reads and acknowledges throughout. Writers exit cleanly (their
slot's lease released: the next pod takes it at once) or are killed (their lease
expires ``lease.ttl`` after its last renewal by the storage's clock; a pod that comes
sooner takes a new number, one that comes later takes the slot over and seals what
the killed one committed).

The bound: at most ``K`` writers at once, plus one partition for each writer that
came while a killed writer's lease had not expired yet and every lower slot was held
(the schedule below has exactly one: :data:`SLACK`).

A paused writer (every request held at its fault proxy: a GC pause, a network
partition) whose slot another pod took over is fenced: its task fails, its rows are
written by the retry, and its later return to the pool (with its stale WAL) seals
nothing twice.

A longer random schedule (200 pods, two subscribers, requests per idle poll counted
at its start and end) runs with ``make soak``.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig, WalConfig
from quiver_spark.config import NAME_RE
from quiver_spark.objects import open_objects
from tests.driven import ChildRaised, Driven
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import options_through, processes

__all__ = ["fault_proxies", "moto_s3", "processes"]

TTL_S = 2.0
"""The writer lease ttl of every process (store option ``lease.ttl``)."""

EXPIRED_AFTER_S = TTL_S + 2.0 + 1.5
"""A killed writer's lease is free for a claim once the storage's clock shows it
unwritten for the ttl plus 2 s (the clock's resolution), with S3's whole seconds and a
margin on top."""

K = 3
"""The most writers alive at once in the schedule."""

SLACK = 1
"""Writers that came while a killed writer's lease had not expired and every lower
slot was held (each mints one number more)."""

ROWS = 4
APP = "query-1"
SCHEMA = pa.schema([("id", pa.int64())])

POD = '''
from quiver_spark.control import lease as lease_mod

# another machine: its own host name and kernel, so no other process takes its lease
# for one of a dead process of its host; only expiry frees it
_ident = lease_mod._Identity(host, os.getpid(), lease_mod._start_time(os.getpid()), "node-" + host)
lease_mod._me = lambda: _ident
config = StoreConfig(
    wal=WalConfig(path=wal, flush_interval_s=0),
    segment=SegmentConfig(max_open_duration_s=3600),
    lease_ttl_s=ttl,
)

def claim():
    """What the sink's worker does at its first write: claim a slot (again after its
    cached slot failed)."""
    global store
    store = QuiverStore.open_slot(root, config, host=host, storage_options=opts)
    return store.writer.pid

def txn(version, lo, n):
    """A write task: rows lo .. lo + n - 1, durable, staged; its commit message."""
    t = store.begin_txn(app, version)
    store.append(pa.record_batch({"id": pa.array(range(lo, lo + n), pa.int64())}), txn_id=t)
    store.flush()
    store.stage_txn(t)
    return [store.writer.pid, t]

def evict():
    """The sink drops a slot whose task failed on it (a close that fails is logged)."""
    try:
        store.close()
    except Exception as e:
        return type(e).__name__
    return None

slot = claim()
result = slot
'''

SUBSCRIBER = '''
config = StoreConfig(wal=WalConfig(path=wal), lease_ttl_s=ttl)
sub = Subscription.open(root, name, config=config, storage_options=opts)
sub.start("earliest")

def drain():
    """Every batch from where the subscriber stands, read and acknowledged: the ids."""
    out = []
    while (batch := sub.poll()) is not None:
        for meta in batch.segments:
            out += [i for b in sub.read(meta) for i in b.column("id").to_pylist()]
        sub.ack(batch.end)
    return out

def idle():
    """A poll with nothing new (every committed row read already)."""
    assert sub.poll() is None
'''


def str_options(options: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in options.items()}


class Cluster:
    """The driver of one store: starts writer pods, runs batches, commits them, and keeps
    a subscriber reading."""

    def __init__(
        self,
        root: str,
        moto: MotoS3,
        tmp_path: Path,
        processes: Callable[[str], Driven],
        subscribers: dict[str, dict[str, str] | None] | None = None,
    ) -> None:
        """``subscribers``: name -> its storage options (None: straight to moto), each
        a process of its own reading throughout; one, ``exporter``, by default."""
        self.root, self.tmp_path, self.processes = root, tmp_path, processes
        self.opts = str_options(moto.options)
        self.config = StoreConfig(
            wal=WalConfig(path=str(tmp_path / "wal-driver")), lease_ttl_s=TTL_S
        )
        self.store_id = QuiverStore.prepare_writes(
            root, self.config, SCHEMA, storage_options=self.opts
        )
        self.version = 0
        self.next_id = 0
        self.committed: list[int] = []
        self.live: dict[str, Driven] = {}
        self.spare: list[Driven] = []
        self.subs: dict[str, Driven] = {}
        self.reads: dict[str, list[int]] = {}
        for name, opts in (subscribers or {"exporter": None}).items():
            self.subs[name] = processes(f"subscriber {name}")
            self.subs[name].run(
                SUBSCRIBER,
                root=root,
                name=name,
                opts=opts or self.opts,
                wal=str(tmp_path / f"wal-sub-{name}"),
                ttl=TTL_S,
            )
            self.reads[name] = []

    def warm(self, n: int) -> None:
        """Start ``n`` interpreters ahead (a pod's start is then its claim only)."""
        self.spare += [self.processes(f"spare {i}") for i in range(n)]

    def start(self, host: str, opts: dict[str, str] | None = None) -> str:
        """Pod ``host`` comes up and claims a slot; returns the slot."""
        proc = self.spare.pop() if self.spare else self.processes(host)
        proc.name = host
        slot = proc.run(
            POD,
            root=self.root,
            opts=opts or self.opts,
            wal=str(self.tmp_path / f"wal-{host}"),
            ttl=TTL_S,
            app=APP,
            host=host,
        )
        self.live[host] = proc
        return str(slot)

    def batch(self, pods: list[str] | None = None) -> None:
        """One micro-batch: a task on each pod, then the driver's commit of them all."""
        self.version += 1
        winners: list[tuple[str, int]] = []
        for host in pods if pods is not None else sorted(self.live):
            slot, txn = self.live[host].run(f"txn({self.version}, {self.next_id}, {ROWS})")
            winners.append((slot, txn))
            self.committed += range(self.next_id, self.next_id + ROWS)
            self.next_id += ROWS
        decided = QuiverStore.commit_batch(
            self.root,
            self.config,
            APP,
            self.version,
            winners,
            ROWS * len(winners),
            store_id=self.store_id,
            storage_options=self.opts,
        )
        assert decided.seal_error is None, decided.seal_error
        self.drain()

    def drain(self) -> None:
        for name, sub in self.subs.items():
            self.reads[name] += sub.run("drain()", timeout=60)

    def all_read(self) -> bool:
        return all(sorted(r) == sorted(self.committed) for r in self.reads.values())

    def leave(self, host: str) -> None:
        """The pod's worker exits: its slot sealed and released."""
        proc = self.live.pop(host)
        proc.run("store.close()")
        proc.close()

    def kill(self, host: str) -> None:
        """The pod is killed (its lease stays as it was last renewed)."""
        proc = self.live.pop(host)
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(10)
        proc.close()

    def finish(self, within: float = 40.0) -> None:
        """Every live pod leaves; the subscriber reads until it has every committed row
        (a killed pod's slot nobody took again is sealed by an observer once its lease
        is seen unrenewed for its ttl: the subscriber's planning)."""
        for host in list(self.live):
            self.leave(host)
        deadline = time.monotonic() + within
        while not self.all_read() and time.monotonic() < deadline:
            time.sleep(0.5)
            self.drain()

    def partitions(self) -> list[str]:
        """Every partition the bucket holds anything of (its lease and MANIFEST stay
        after gc removed its segments): what the store's readers enumerate at most."""
        objects = open_objects(self.root, self.opts)
        found = {*objects.list_dirs("partitions/"), *objects.list_dirs("segments/")}
        return sorted(n for n in found if NAME_RE.fullmatch(n))  # not segments/~hints/

    def check_exactly_once(self) -> None:
        """Every subscriber read every committed row once."""
        for name, read in self.reads.items():
            missing = sorted(set(self.committed) - set(read))
            twice = sorted(i for i, n in Counter(read).items() if n > 1)
            extra = sorted(set(read) - set(self.committed))
            assert not (missing or twice or extra), (
                f"{name}: missing {missing}, read twice {twice}, never committed {extra}\n"
                + "\n".join(p.log_tail(20) for p in [*self.subs.values(), *self.live.values()])
            )


def test_pods_that_come_and_go_reuse_slots_and_every_row_is_read_once(
    tmp_path: Path, moto_s3: MotoS3, processes: Callable[[str], Driven]
) -> None:
    c = Cluster(f"{moto_s3.url}/{unique_prefix('churn')}", moto_s3, tmp_path, processes)
    c.warm(7)
    assert [c.start(h) for h in ("pod-0", "pod-1", "pod-2")] == ["w-0", "w-1", "w-2"]
    c.batch()

    c.leave("pod-0")  # exits: its slot released, the next pod takes it at once
    assert c.start("pod-3") == "w-0"
    c.batch()

    c.kill("pod-1")  # its committed rows are staged; its lease is still fresh
    assert c.start("pod-4") == "w-3", "a lease renewed less than a ttl ago was taken"
    c.batch()

    c.kill("pod-2")
    time.sleep(EXPIRED_AFTER_S)  # pod-1's and pod-2's leases are a ttl old now
    assert c.start("pod-5") == "w-1"  # the lowest free slot, taken over
    c.batch()

    c.kill("pod-3")
    time.sleep(EXPIRED_AFTER_S)
    assert c.start("pod-6") == "w-0"
    c.batch()

    c.finish()
    c.check_exactly_once()
    assert len(c.committed) == 5 * K * ROWS
    parts = c.partitions()
    assert len(parts) <= K + SLACK, parts
    assert parts == ["w-0", "w-1", "w-2", "w-3"]


def test_a_paused_pod_whose_slot_was_taken_over_is_fenced_and_seals_nothing_twice(
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
    processes: Callable[[str], Driven],
) -> None:
    """Pod Z is paused in the middle of a task (its staged write, and every later
    request, held at its proxy) while pod S takes its slot over; Z's task fails when it
    goes on, Spark's retry writes its rows on S, and Z, back in the pool with the WAL
    still holding the failed task's rows, writes again exactly once."""
    c = Cluster(f"{moto_s3.url}/{unique_prefix('paused-pod')}", moto_s3, tmp_path, processes)
    c.warm(2)
    pz = fault_proxies()
    assert c.start("pod-z", str_options(options_through(pz))) == "w-0"
    c.batch()
    z = c.live.pop("pod-z")  # the driver waits for Z's task; S comes meanwhile

    held = pz.add_rule(method="PUT", path=r"/partitions/w-0/txns/\d{20}\.txn$", hold_later=True)
    c.version += 1
    paused = z.start(f"txn({c.version}, 1000, {ROWS})")  # never committed
    held.wait_hit(30)
    time.sleep(EXPIRED_AFTER_S)  # no renewal of Z's lands: its lease goes a ttl old

    assert c.start("pod-s") == "w-0"  # takes the slot over; its WAL starts empty
    c.version -= 1
    c.batch(["pod-s"])  # the task Z was running, retried on S: the same batch

    pz.release()  # Z goes on: its late requests land
    failed = paused.outcome(30)
    assert isinstance(failed, ChildRaised), f"Z's task succeeded after its slot moved: {failed}"
    assert failed.is_a("LeaseLostError") or failed.is_a("FileExistsError"), failed
    z.run("evict()")  # its publication is fenced: the close fails, logged

    c.batch(["pod-s"])
    c.leave("pod-s")  # S releases w-0: Z's next claim takes it with its stale WAL
    c.live["pod-z"] = z
    assert z.run("claim()") == "w-0"
    c.batch(["pod-z"])

    c.finish()
    c.check_exactly_once()
    assert c.partitions() == ["w-0"]


IDLE_POLLS = 9
"""Idle polls counted at the start and at the end of the long schedule (their median
compared: a poll now and then also does rate-limited work)."""


def requests_per_idle_poll(c: Cluster, name: str, proxy: FaultProxy) -> list[int]:
    """The requests each of :data:`IDLE_POLLS` polls with nothing new makes (the
    subscriber ``name``'s requests all go through ``proxy``)."""
    c.drain()
    out = []
    for _ in range(IDLE_POLLS):
        before = len(proxy.requests())
        c.subs[name].run("idle()")
        out.append(len(proxy.requests()) - before)
    return out


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_two_hundred_pods_at_random_hold_no_more_partitions_than_held_leases_and_idle_polls_stay_flat(
    tmp_path: Path,
    moto_s3: MotoS3,
    processes: Callable[[str], Driven],
    fault_proxies: Callable[[], FaultProxy],
) -> None:
    """200 pods, at most 4 alive, each leaving cleanly or killed at random, a new one
    sometimes before a killed one's lease expired, two subscribers reading throughout:
    each reads every row once; the partitions never exceed the most leases held at
    once (pods alive plus killed ones whose lease had not expired yet: each claim
    takes the lowest slot not held, so it mints a number only when every lower one is
    held); and an idle poll makes as many requests at the end as when the first 4
    pods were up (a retired slot costs a poll nothing more; medians)."""
    rng = random.Random(int(os.environ.get("QUIVER_SEED", "7")))
    counted = fault_proxies()
    c = Cluster(
        f"{moto_s3.url}/{unique_prefix('churn-soak')}",
        moto_s3,
        tmp_path,
        processes,
        subscribers={"exporter": str_options(options_through(counted)), "audit": None},
    )
    pods = int(os.environ.get("QUIVER_CHURN_PODS", "200"))
    most, fresh_kills, held_peak = 4, 0, 0
    idle_first: list[int] = []
    t0 = time.monotonic()
    for n in range(pods):
        if len(c.live) == most:
            host = rng.choice(sorted(c.live))
            if rng.random() < 0.5:
                c.kill(host)
                fresh_kills += 1
            else:
                c.leave(host)
        if fresh_kills and rng.random() < 0.5:
            time.sleep(EXPIRED_AFTER_S)
            fresh_kills = 0
        if not c.spare:
            c.warm(most)  # interpreters start side by side
        c.start(f"pod-{n}")
        held_peak = max(held_peak, len(c.live) + fresh_kills)
        c.batch()
        if n == most - 1:
            idle_first = requests_per_idle_poll(c, "exporter", counted)
    c.finish(within=60)
    c.check_exactly_once()
    parts = c.partitions()
    idle_last = requests_per_idle_poll(c, "exporter", counted)
    print(
        f"\n{pods} pods in {time.monotonic() - t0:.0f} s: {len(c.committed)} rows read once by "
        f"each of {len(c.subs)} subscribers; {len(parts)} partitions {parts} (most leases "
        f"held at once {held_peak}); requests per idle poll {idle_first} at 4 pods, "
        f"{idle_last} at the end"
    )
    assert len(parts) <= held_peak, (parts, held_peak)
    assert statistics.median(idle_last) <= statistics.median(idle_first), (idle_first, idle_last)
