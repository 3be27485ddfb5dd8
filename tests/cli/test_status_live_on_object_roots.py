"""``quiver status`` on an object root shows a subscriber live while a consumer holds
its lease (``readers/<name>.lease``, §12.3), as it does for the lock on a POSIX root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.cli.status import collect_status
from quiver_spark.objects.memory import reset_memory
from quiver_spark.subscription import Subscription
from tests.stores import int_segments


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    reset_memory()
    yield
    reset_memory()


def test_a_consumer_holding_the_lease_is_shown_live(tmp_path: Path) -> None:
    cfg = StoreConfig(
        wal=WalConfig(path=str(tmp_path / "wal")), segment=SegmentConfig(max_open_duration_s=3600)
    )
    int_segments("memory://bkt/s", [(0, 1)], config=cfg)
    with QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False) as store:
        with Subscription(store, "fwd") as sub:
            sub.start()
            (row,) = collect_status(store)["subscribers"]
            assert row["name"] == "fwd" and row["live"] is True
        (row,) = collect_status(store)["subscribers"]
        assert row["live"] is False
