"""Store roots and segment locations, as the engine and the Spark options see them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import ConfigError
from quiver_spark.options import store_config_from_options
from quiver_spark.spark.options import store_config, store_root, validate_sink_options
from quiver_spark.urls import check_url, local_path

LOADED = sys.modules["fsspec.registry"]._registry


@pytest.fixture
def no_ocifs(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one where ocifs (fsspec's ``oci://``) is not installed."""
    monkeypatch.setitem(sys.modules, "ocifs", None)
    monkeypatch.delitem(LOADED, "oci", raising=False)


def test_file_urls_are_local_paths() -> None:
    assert local_path("path", "file:///data/q") == "/data/q"
    assert local_path("path", "file://localhost/data/q") == "/data/q"
    assert local_path("path", "file:/data/q") == "/data/q"
    assert store_root({"path": "file:///data/q"}) == "/data/q"
    assert check_url("segment.path", "file:///data/segs") == "file:///data/segs"


@pytest.mark.parametrize(
    ("path", "says"),
    [("dbfs:/mnt/q", "/dbfs/mnt/q"), ("hdfs://nn/q", "s3://bucket/prefix"),
     ("file://host/q", "file:///absolute/path"), ("hdfs:///q", "object-store URL"),
     ("s3://", "a URL with a bucket after s3://")],
)  # fmt: skip
def test_a_root_that_is_neither_local_nor_an_object_store_is_refused_at_query_start(path: str, says: str) -> None:
    with pytest.raises(ConfigError, match="'path'") as e:
        validate_sink_options({"path": path})
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [("oci://bucket@ns/p", "pip install ocifs"),
     ("gopher://x/y", "gopher:// is none of them"),
     ("dbfs:/mnt/q", "/dbfs/mnt/q"),
     ("s3://", "s3://bucket/prefix")],
)  # fmt: skip
def test_a_segments_location_that_cannot_work_fails_at_query_start(
    url: str, says: str, no_ocifs: None
) -> None:
    with pytest.raises(ConfigError, match=r"'segment\.path'") as e:
        store_config({"path": "/q", "segment.path": url})
    assert says in str(e.value)


def test_segment_file_urls_work_end_to_end(tmp_path: Path) -> None:
    import pyarrow as pa

    cfg = store_config_from_options({"segment.path": f"file://{tmp_path / 'segs'}"})
    with QuiverStore.open(str(tmp_path / "store"), cfg, partition="p-0") as store:
        store.append(pa.record_batch({"x": [1, 2]}))
        store.finalize()
    assert (tmp_path / "segs" / "p-0").is_dir()


def test_create_with_a_bad_segments_location_writes_nothing(tmp_path: Path, no_ocifs: None) -> None:
    root = tmp_path / "store"
    for url in ("oci://bucket@ns/p", "nope://x/y", "dbfs:/mnt/q", "s3://AKIAX:hunter2@bucket/p"):
        cfg = store_config_from_options({"segment.path": url})
        with pytest.raises(ConfigError, match=r"segment\.path"):
            QuiverStore.open(str(root), cfg, partition=None)
        assert not root.exists()
