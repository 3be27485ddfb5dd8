"""``quiver status`` on an object root shows a subscriber live while a consumer holds
its lease (``readers/<name>.lease``, §8.2), as it does for the lock on a POSIX root."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.status import collect_status
from quiver_spark.subscription import Subscription
from tests.stores import int_segments, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_a_consumer_holding_the_lease_is_shown_live(tmp_path: Path) -> None:
    cfg = wal_in(tmp_path / "wal")
    int_segments("memory://bkt/s", [(0, 1)], config=cfg)
    with QuiverStore.open("memory://bkt/s", cfg, partition=None, create=False) as store:
        with Subscription(store, "fwd") as sub:
            sub.start()
            (row,) = collect_status(store)["subscribers"]
            assert row["name"] == "fwd" and row["live"] is True
        (row,) = collect_status(store)["subscribers"]
        assert row["live"] is False
