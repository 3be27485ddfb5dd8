"""Processes of one object root in S3 (moto), each behind a fault proxy of its own
(``tests/fault_proxy.py``), for the scenarios of paused lease holders: a writer of
partition ``p-0`` on "a machine" (its own ``wal.path``), a live consumer, and what a
fresh reader finds in the bucket afterwards. Every process runs with the short lease
ttl :data:`TTL_S` (store option ``lease.ttl``), so a holder whose requests are held
is taken over a few seconds later.

Two processes of this host stand for two machines: a lease held by a running process
of this host is never taken over at once, and a claimant whose holder is such a
process is refused at once rather than waiting (§8.2), so a successor retries its
open until it has watched the lease unchanged for the ttl (as a restarted task or
query does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.layout import manifest as manifest_key
from tests.driven import Driven
from tests.fault_proxy import FaultProxy
from tests.moto_server import MotoS3, s3_options

TTL_S = 2.0
"""The lease ttl of every process of these scenarios."""

TAKE_OVER_WITHIN_S = 3 * TTL_S + 10.0
"""How long a successor keeps trying to take a lease over before the test fails."""

APP = "query-1"

WRITER = '''
config = StoreConfig(
    wal=WalConfig(path=wal, flush_interval_s=0),
    segment=SegmentConfig(max_open_duration_s=3600),
    lease_ttl_s=ttl,
)

def open_writer(within):
    """The writer of p-0; a lease held by another process is tried again until it
    has been watched unchanged for its ttl (or ``within`` seconds passed)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return QuiverStore.open(
                root, config, partition="p-0", background=False, storage_options=opts
            )
        except LeaseHeldError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

def txn(version, lo, n):
    """A Spark write task (rows lo .. lo + n - 1 as one transaction of batch
    ``version``: durable, staged) and its driver's decision. True once decided."""
    t = store.begin_txn(app, version)
    store.append(pa.record_batch({"id": pa.array(range(lo, lo + n), pa.int64())}), txn_id=t)
    store.flush()
    store.stage_txn(t)
    return store.commit_txn(app, version, [("p-0", t)], rows=n)

def seal():
    """A maintenance tick (committed transactions join the open segment), then the
    open segment sealed. True when a segment was published."""
    store.writer.maintain()
    return store.finalize() is not None

store = open_writer(within)
'''


@pytest.fixture
def processes() -> Iterator[Callable[[str], Driven]]:
    """Starts named processes (:class:`~tests.driven.Driven`); all ended after the test."""
    made: list[Driven] = []

    def start(name: str) -> Driven:
        made.append(Driven(name))
        return made[-1]

    yield start
    for proc in made:
        proc.close()


def options_through(proxy: FaultProxy) -> dict[str, str]:
    """A process's storage options: every request through ``proxy``; a held request
    is never given up by the client while the scenario runs."""
    return {k: str(v) for k, v in s3_options(proxy.endpoint, timeout="120s").items()}


def writer(proc: Driven, root: str, proxy: FaultProxy, wal: Path, *, within: float = 0.0) -> Driven:
    """``proc`` (started beforehand: an interpreter takes a moment to start) made the
    writer of ``p-0`` of ``root``, its requests through ``proxy``, its WAL in ``wal``;
    it keeps trying to take a held lease over for ``within`` seconds. It has
    ``store``, ``txn(version, lo, n)`` and ``seal()`` (publishes what is committed)."""
    proc.run(
        WRITER,
        timeout=within + 60.0,
        root=root,
        opts=options_through(proxy),
        wal=str(wal),
        ttl=TTL_S,
        app=APP,
        within=within,
    )
    return proc


def bucket_ids(root: str, moto: MotoS3) -> list[int]:
    """Every ``id`` a fresh reader of ``root`` finds, sorted (a row twice is listed twice)."""
    with QuiverStore.open(
        root, partition=None, create=False, background=False, storage_options=moto.options
    ) as store:
        return sorted(i for b in store.scan() for i in b.column("id").to_pylist())


def manifest_problems(root: str, moto: MotoS3, partition: str = "p-0") -> list[str]:
    """What is wrong with ``partition``'s MANIFEST: a segment it lists whose ``.arrow``
    or ``.meta`` is missing, or whose ``.arrow`` is not the size it records."""
    with QuiverStore.open(
        root, partition=None, create=False, background=False, storage_options=moto.options
    ) as store:
        objects = store.objects
        got = store.manifests.read(partition)
        if got is None:
            return [f"{manifest_key(partition)} is missing or unreadable"]
        problems = []
        for e in got.entries:
            arrow = objects.info(f"segments/{partition}/{e.seq:020d}.arrow")
            meta = objects.head(f"segments/{partition}/{e.seq:020d}.meta")
            if arrow is None or meta is None:
                problems.append(f"seq {e.seq} listed, .arrow {arrow}, .meta {meta}")
            elif arrow.size != e.size_bytes:
                problems.append(f"seq {e.seq}: .arrow of {arrow.size} bytes, listed {e.size_bytes}")
        return problems


CONSUMER = '''
from quiver_spark.errors import SubscriberError
from quiver_spark.subscription.planning import Caps

config = StoreConfig(wal=WalConfig(path=wal), lease_ttl_s=ttl)

def open_consumer(within):
    """The subscriber's live consumer; one held by another process is claimed again
    until that one has been watched unrenewed for its ttl (or ``within`` s passed)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return Subscription.open(root, subscriber, config=config, storage_options=opts)
        except SubscriberError as e:
            if "already has a live consumer" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)

planned = None

def plan(n=None):
    """The next batch (at most ``n`` segments): its segments' seqs, or None."""
    global planned
    planned = sub.poll(Caps(max_segments=n))
    return None if planned is None else [m.seq for m in planned.segments]

def read():
    """The ids of the planned batch, read."""
    return [i for m in planned.segments for b in sub.read(m) for i in b.column("id").to_pylist()]

def ack():
    """Acknowledge the planned batch."""
    return sub.ack(planned.end)

def deliver(n=None):
    """One batch (at most ``n`` segments) planned, read and acknowledged: its ids, or
    None when there was nothing to plan."""
    if plan(n) is None:
        return None
    ids = read()
    ack()
    return ids

def drain():
    """Every batch from where the subscriber stands: the ids read, each batch acknowledged."""
    out = []
    while (ids := deliver()) is not None:
        out += ids
    return out

sub = open_consumer(within)
'''


def consumer(
    proc: Driven,
    root: str,
    proxy: FaultProxy,
    wal: Path,
    *,
    subscriber: str = "s",
    within: float = 0.0,
) -> Driven:
    """``proc`` made ``subscriber``'s live consumer ``sub`` of ``root`` (requests
    through ``proxy``); it keeps claiming a held subscriber for ``within`` seconds. It
    has ``plan(n)``, ``read()``, ``ack()``, ``deliver(n)`` and ``drain()``."""
    proc.run(
        CONSUMER,
        timeout=within + 60.0,
        root=root,
        opts=options_through(proxy),
        wal=str(wal),
        ttl=TTL_S,
        subscriber=subscriber,
        within=within,
    )
    return proc
