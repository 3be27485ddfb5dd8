"""A live consumer opened before its subscriber was registered holds no claim in the
ack log (ARCHITECTURE.md §13.7). When that process is paused past its lease and
another consumer takes the subscriber over (its lease, its registration, its claim),
the paused consumer's ``start`` once it resumes must not claim the subscriber back:
a claim is made by the consumer that holds the lease, before it reads its position,
and the claim latest in the log names the one consumer whose acknowledgements count.
A claim written by a consumer whose lease moved refuses every acknowledgement of the
consumer that holds it. Real processes on an S3 root; the pause is a SIGSTOP.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore
from tests.driven import ChildRaised, Driven
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import TAKE_OVER_WITHIN_S, TTL_S, consumer, options_through, processes
from tests.stores import wal_in

__all__ = ["fault_proxies", "moto_s3", "processes"]


def test_a_consumer_paused_before_its_start_never_takes_the_subscriber_from_the_live_one(
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
    processes: Callable[[str], Driven],
) -> None:
    root = f"{moto_s3.url}/{unique_prefix('late-start')}"
    pw, pc1, pc2 = fault_proxies(), fault_proxies(), fault_proxies()
    c1, c2 = processes("consumer C1"), processes("consumer C2")
    with QuiverStore.open(
        root,
        wal_in(tmp_path / "wal-w"),
        partition="p-0",
        background=False,
        storage_options=options_through(pw),
    ) as w:
        for k in range(4):
            w.append(pa.record_batch({"id": pa.array([3 * k, 3 * k + 1, 3 * k + 2], pa.int64())}))
            assert w.finalize() is not None
    consumer(c1, root, pc1, tmp_path / "wal-c1")  # opened; the subscriber is not registered
    os.kill(c1.proc.pid, signal.SIGSTOP)  # paused past its lease's ttl
    try:
        consumer(c2, root, pc2, tmp_path / "wal-c2", within=TAKE_OVER_WITHIN_S)
        c2.run("sub.start('earliest')")
        assert c2.run("deliver(1)") == [0, 1, 2]
    finally:
        os.kill(c1.proc.pid, signal.SIGCONT)
    time.sleep(TTL_S / 2)  # its lease keeper runs again
    c1.start("sub.start()").outcome(30)  # refused, or harmless to the live consumer
    # the consumer holding the lease goes on delivering and acknowledging
    rest = c2.start("drain()").outcome(30)
    assert not isinstance(rest, ChildRaised), f"the live consumer was refused: {rest}"
    assert rest == list(range(3, 12))
