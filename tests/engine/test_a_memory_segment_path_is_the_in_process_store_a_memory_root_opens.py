"""``memory://`` names one store wherever it appears: a ``segment.path`` there is the
engine's in-process object store a ``memory://`` root opens (``MemoryObjects``, through
the same client as an ``s3://`` segment path's: the store a root there opens), never
fsspec's memory filesystem. A store on a POSIX root writes, scans, acknowledges and
reclaims its segments there; what it wrote is seen by a ``memory://`` root's client of
the same name, fsspec's memory filesystem holds none of it, and the storage options a
``memory://`` root refuses are refused for a segment path there before the store is
created, and so is a ``memory://`` URL naming no store, as a root's would be."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.errors import ConfigError
from quiver_spark.objects import open_objects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.options import store_config_from_options
from quiver_spark.segment.objects import BucketBackend
from quiver_spark.subscription import Subscription
from quiver_spark.urls import OBJECTS, check_url, root_location, segments_client
from tests.stores import acked_ids, id_batch, scanned_ids


def _config(url: str, wal: Path) -> StoreConfig:
    return store_config_from_options(
        {
            "segment.path": url,
            "segment.max_open_duration": "1h",
            "wal.path": str(wal),
            "wal.flush_interval": "0",
        }
    )


def test_a_store_keeps_its_segments_in_the_memory_store_a_root_there_opens(
    bucket: str, tmp_path: Path
) -> None:
    url = f"memory://{bucket}/segs"
    assert check_url("segment.path", url) == url and segments_client(url) == OBJECTS
    root = str(tmp_path / "store")
    with QuiverStore.open(
        root, _config(url, tmp_path / "wal"), partition="p-0", background=False
    ) as store:
        assert isinstance(store.segment_location.backend, BucketBackend)
        assert isinstance(store.segment_location.backend.objects, MemoryObjects)
        for lo in (0, 10, 20):
            store.append(id_batch(lo, 10))
            store.flush()
            store.finalize()
        assert [m.seq for m in store.segments()] == [1, 2, 3]
    as_root = open_objects(url)  # what a memory:// root of this name sees
    files = sorted(i.key for i in as_root.list("p-0/") if i.key.endswith((".arrow", ".meta")))
    assert files == [f"p-0/{seq:020d}.{ext}" for seq in (1, 2, 3) for ext in ("arrow", "meta")]
    assert not fsspec.filesystem("memory").exists(f"/{bucket}"), "fsspec's store holds it"
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        assert store.segments_url == url
        assert scanned_ids(store) == list(range(30))
    with Subscription.open(root, "s") as sub:
        assert acked_ids(sub) == list(range(30))
    assert [i.key for i in as_root.list("p-0/") if i.key.endswith(".arrow")] == [], (
        "segments every subscriber acknowledged are still there"
    )


def test_a_storage_option_a_memory_root_refuses_is_refused_for_a_segment_path_there(
    bucket: str, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    with pytest.raises(ConfigError, match="no storage options for memory://"):
        QuiverStore.open(str(root), _config(f"memory://{bucket}/segs", tmp_path / "wal"),
                         partition=None, background=False,
                         storage_options={"auto_mkdir": True})  # fmt: skip
    assert not root.exists()


def test_a_memory_segment_path_naming_no_store_is_refused_as_a_root_is() -> None:
    with pytest.raises(ConfigError, match=r"'segment\.path'.*memory://bucket/"):
        check_url("segment.path", "memory:///segs")
    with pytest.raises(ConfigError, match=r"'path'.*memory://bucket/"):
        root_location("path", "memory:///segs")
