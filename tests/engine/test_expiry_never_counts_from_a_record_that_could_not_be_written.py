"""A subscriber that acknowledged moments ago is never expired because its record was stale.

The subscription record is advisory for everything but expiry (§8.10): updates of it
that fail (a full disk) are logged and never fail an acknowledgement or a close. The
price of that must not be data: a consumer that acknowledged and stopped while its
record could not be rewritten is not expired by the first pass after space returns
as if it had been idle since the record's last successful write.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from tests.faults import FaultyIO

HOUR_NS = 3600 * 10**9
EXPIRES_AFTER_AN_HOUR = StoreConfig(
    segment=SegmentConfig(max_open_duration_s=3600), subscriber_expire_after_s=3600
)


def test_a_consumer_that_acked_and_stopped_on_a_full_disk_is_not_expired_right_after(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    with QuiverStore.open(root, EXPIRES_AFTER_AN_HOUR, background=False) as writer:
        for _ in range(2):
            writer.append(pa.record_batch({"k": pa.array([1, 2, 3], pa.int64())}))
            writer.finalize()
    # registered two hours ago; its record has not been rewritten since
    records.create_record(root, FaultyIO(), "c", time.time_ns() - 2 * HOUR_NS)
    io = FaultyIO()
    store = QuiverStore.open(root, partition=None, create=False, io=io, background=False)
    full = io.fail("write", 1, errno.ENOSPC, sticky=True, path_contains=".sub")
    sub = Subscription(store, "c")
    sub.start()
    batch = sub.poll()
    assert batch is not None
    assert sub.ack(batch.end) == 2  # durable in the ack log; the record update fails
    sub.close()
    assert full.fired
    io.faults.remove(full)  # space returns
    result = store.run_retention()
    assert result.expired == []
    assert store.subscribers.subscribers() == ["c"]
    store.close()
