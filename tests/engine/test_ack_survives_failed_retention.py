"""An acknowledgement that is durable reports success, whatever its retention pass meets.

``Subscription.ack`` records the acknowledgement in the ack log, then runs the store's
retention pass. A pass that fails (a full disk or an I/O error while deleting
segments) is maintenance: it is logged, kept as the store's ``maintenance_error`` and
retried by the next acknowledgement or pass, never raised into the ack, so a caller
never believes a durable acknowledgement failed (and never retries or re-reads what
it already acknowledged).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.faults import FaultyIO
from tests.stores import int_segments

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _metas(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / "segments" / "p-0").glob("*.meta"))


def test_an_ack_whose_retention_pass_fails_succeeds_and_the_next_pass_reclaims(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)])
    io = FaultyIO()
    store = QuiverStore.open(str(tmp_path), partition=None, create=False, background=False, io=io)
    with Subscription(store, "fwd", owns_store=True) as sub:
        sub.start("earliest")
        io.fail("unlink", 1, errno.ENOSPC, path_contains="/segments/", sticky=True)
        batch = sub.poll()
        assert batch is not None
        assert sub.ack(batch.end) == 3  # durable: the failed pass is not the ack's error
        assert sub.acked() == Position({"p-0": 3})
        assert sub.store.maintenance_error is not None
        io.faults.clear()  # the disk frees up
        sub.ack(batch.end)  # nothing new to acknowledge: the pass is retried all the same
        assert _metas(tmp_path) == []
    with Subscription.open(str(tmp_path), "fwd") as again:
        assert again.acked() == Position({"p-0": 3})
        assert again.poll() is None


def test_on_an_object_root_the_pass_after_a_failed_deletion_reclaims_the_segments(
    tmp_path: Path,
) -> None:
    cfg = StoreConfig(
        wal=WalConfig(path=str(tmp_path / "wal")), segment=SegmentConfig(max_open_duration_s=3600)
    )
    int_segments("memory://bkt/s", [(0, 1), (1, 1), (2, 1)], config=cfg)
    store = QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False, background=False)
    objects = store.objects
    assert isinstance(objects, MemoryObjects)

    def full(op: str, key: str) -> None:
        if op == "delete" and key.startswith("segments/"):
            raise OSError(errno.ENOSPC, "No space left on device", key)

    with Subscription(store, "fwd", owns_store=True) as sub:
        sub.start("earliest")
        objects.faults.before = full
        batch = sub.poll()
        assert batch is not None
        assert sub.ack(batch.end) == 3
        assert sub.store.maintenance_error is not None
        objects.faults.before = None
        sub.ack(batch.end)
        left = [o.key for o in MemoryObjects("bkt", "s").list("segments/p-0/")]
        assert left == []
