"""A read (GET, LIST) of an object root that meets a short storm of transient errors,
a few consecutive S3 ``503 SlowDown`` answers well within the root's retry budget
``storage.retry_timeout``, never fails the call that made it (ARCHITECTURE.md §2.2
"The budget", §16.2 "Transient is not fatal": a query fails only for a decided
outcome or once the budget ran out). A consumer starting and reading through a
fault proxy that answers the next eight reads of one object with a ``503`` gets its
rows, as it does when the storm hits a conditional write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import options_through
from tests.stores import acked_ids, id_batch, wal_in

__all__ = ["fault_proxies", "moto_s3"]

STORM = 8
"""Consecutive ``503`` answers: about a second of them, against a 30 s budget."""

READS = {
    "the MANIFEST's GET": ("GET", r"/partitions/p-0/MANIFEST$"),
    "the ack log's LIST": ("GET", r"list-type=2&prefix=[^&]*/subscribers/log/"),
}


@pytest.mark.parametrize("read", list(READS))
def test_a_consumer_gets_its_rows_through_a_short_storm_of_503s_on_a_read(
    read: str,
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
) -> None:
    root = f"{moto_s3.url}/{unique_prefix('read-storm')}"
    proxy = fault_proxies()
    opts = {**options_through(proxy), "retry_timeout": "30s"}
    with QuiverStore.open(
        root, wal_in(tmp_path / "wal-w"), partition="p-0", background=False, storage_options=opts
    ) as w:
        w.append(id_batch(0, 3))
        w.flush()
        assert w.finalize() is not None
    sub = Subscription.open(root, "s", config=wal_in(tmp_path / "wal-s"), storage_options=opts)
    try:
        method, path = READS[read]
        proxy.add_rule(method=method, path=path, action="503", times=STORM)
        sub.start("earliest")
        assert acked_ids(sub) == [0, 1, 2], proxy.describe()
    finally:
        sub.close()
