"""On an object root a core slot ``<host>-<k>`` is claimed by its writer's lease
``partitions/<host>-<k>/LEASE`` (ARCHITECTURE.md §12.3): a slot whose lease another
writer holds is skipped for the next one, and a slot given back (evicted, closed) is
released for the next claimant at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.control.lease import current_holder
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.spark import slots

URL = "memory://slots/s"


@pytest.fixture(autouse=True)
def fresh(fresh_memory: None) -> Iterator[None]:
    yield
    slots.close_all()


def config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(
        wal=WalConfig(path=str(tmp_path / "wal")),
        segment=SegmentConfig(max_open_duration_s=3600),
    )


def test_a_slot_whose_lease_another_writer_holds_is_skipped(tmp_path: Path) -> None:
    host = slots.host_tag()
    cfg = config(tmp_path)
    with QuiverStore.open(URL, cfg, partition=f"{host}-0", background=False):
        store = slots.slot_store(URL, cfg)
        assert store.writer is not None and store.writer.pid == f"{host}-1"
        store.append(pa.record_batch({"id": pa.array([1, 2], pa.int64())}))
        store.flush()


def test_an_evicted_slot_releases_its_lease_for_the_next_claimant(tmp_path: Path) -> None:
    host = slots.host_tag()
    cfg = config(tmp_path)
    store = slots.slot_store(URL, cfg)
    assert store.writer is not None and store.writer.pid == f"{host}-0"
    objects = MemoryObjects("slots", "s")
    key = f"partitions/{host}-0/LEASE"
    assert current_holder(objects, key) is not None
    slots.evict(URL, cfg)
    assert current_holder(objects, key) is None  # released: taken at once
    again = slots.slot_store(URL, cfg)
    assert again.writer is not None and again.writer.pid == f"{host}-0"
