"""A conditional write that meets a transient error, an S3 ``503 SlowDown`` or a
connection closed after the write landed, never fails the call that made it, and its
rows are kept exactly once (ARCHITECTURE.md §2.2 "Unknown outcome", §2.3, §13.7,
§10.2): a commit record, the MANIFEST replace of a publication, a staged transaction
and an ack-log delta, each written through a fault proxy that answers one of them
with a ``503`` (nothing written) or loses its answer (written). The write is tried
again with the same bytes and an unknown outcome is resolved by reading back (§16.2,
"Transient is not fatal"): a retry that finds its own bytes is the success it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription
from tests.fault_proxy import FaultProxy, Rule, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import APP, bucket_ids, options_through
from tests.stores import id_batch, wal_in

__all__ = ["fault_proxies", "moto_s3"]

ACTIONS = ["503", "drop_response"]

WRITES = {
    "a commit record": r"/commits/query-1/\d{20}\.commit$",
    "the MANIFEST": r"/partitions/p-0/MANIFEST$",
    "a staged transaction": r"/partitions/p-0/txns/\d{20}\.txn$",
}


def fault(proxy: FaultProxy, path: str, action: str) -> Rule:
    return proxy.add_rule(method="PUT", path=path, action=action, times=1)


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("write", list(WRITES))
def test_a_transaction_whose_control_object_write_met_a_transient_error_is_kept_once(
    write: str,
    action: str,
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
) -> None:
    root = f"{moto_s3.url}/{unique_prefix('transient')}"
    proxy = fault_proxies()
    path = WRITES[write]
    with QuiverStore.open(
        root,
        wal_in(tmp_path / "wal"),
        partition="p-0",
        background=False,
        storage_options=options_through(proxy),
    ) as store:
        assert store.writer is not None
        first = store.begin_txn(APP, 1)  # one transaction without faults first
        store.append(id_batch(0, 3), txn_id=first)
        store.flush()
        assert store.stage_txn(first) > 0
        assert store.commit_txn(APP, 1, [("p-0", first)], rows=3)
        store.writer.maintain()
        assert store.finalize() is not None

        txn = store.begin_txn(APP, 2)
        store.append(id_batch(3, 3), txn_id=txn)
        store.flush()
        rule = fault(proxy, path, action) if write == "a staged transaction" else None
        assert store.stage_txn(txn) > 0
        rule = rule or (fault(proxy, path, action) if write == "a commit record" else None)
        assert store.commit_txn(APP, 2, [("p-0", txn)], rows=3) is True
        rule = rule or fault(proxy, path, action)
        store.writer.maintain()
        assert store.finalize() is not None
        assert rule.hits, f"no write of {write} met the fault:\n{proxy.describe()}"
        assert store.staged() == {}, proxy.describe()
    assert bucket_ids(root, moto_s3) == list(range(6)), proxy.describe()


@pytest.mark.parametrize("action", ACTIONS)
def test_an_acknowledgement_whose_ack_log_delta_met_a_transient_error_is_kept_once(
    action: str,
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
) -> None:
    root = f"{moto_s3.url}/{unique_prefix('transient-ack')}"
    proxy = fault_proxies()
    with QuiverStore.open(
        root,
        wal_in(tmp_path / "wal-w"),
        partition="p-0",
        background=False,
        storage_options=moto_s3.options,
    ) as w:
        for lo in (0, 3):
            w.append(pa.record_batch({"id": pa.array(range(lo, lo + 3), pa.int64())}))
            assert w.finalize() is not None
    config = wal_in(tmp_path / "wal-c")
    with Subscription.open(root, "s", config=config, storage_options=options_through(proxy)) as sub:
        batch = sub.poll()
        assert batch is not None
        read = [i for m in batch.segments for b in sub.read(m) for i in b.column("id").to_pylist()]
        rule = fault(proxy, r"/subscribers/log/\d{20}\.ack$", action)
        assert sub.ack(batch.end) == 2
        assert rule.hits, f"the acknowledgement met no fault:\n{proxy.describe()}"
    assert sorted(read) == list(range(6))
    direct = {k: str(v) for k, v in moto_s3.options.items()}
    with Subscription.open(root, "s", config=config, storage_options=direct) as again:
        assert again.poll() is None  # nothing is delivered twice
        assert again.registry.hwm("s", "p-0") == 2
