"""conf/kubernetes.yaml, the store profile docs/kubernetes.md recommends, loads as a
store profile (``config`` / ``QUIVER_CONFIG``): every store option in it is one, its
values parse into the store's configuration, every storage key is one an S3 root's
client takes, and the profile docs/kubernetes.md shows is the file's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from quiver_spark.objects.options import StorageOptions
from quiver_spark.options import (
    STORAGE_PREFIX,
    flatten,
    load_profile,
    merged_options,
    store_config_from_options,
)

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "conf" / "kubernetes.yaml"
DOC = REPO / "docs" / "kubernetes.md"


def test_the_kubernetes_profile_loads_into_a_store_config() -> None:
    settings = load_profile(str(PROFILE))
    config = store_config_from_options(settings)
    assert config.wal.path == "/quiver-wal"
    assert config.wal.max_size_bytes == 4 * 1024**3
    assert config.segment.max_open_duration_s == 5
    assert config.lease_ttl_s == 30
    assert settings["path"] == "s3://bucket/quiver/events"


def test_the_kubernetes_profile_is_what_quiver_config_names_for_every_query() -> None:
    merged = merged_options({"path": "s3://other/x"}, {"QUIVER_CONFIG": str(PROFILE)})
    assert merged["path"] == "s3://other/x"  # the query's own path wins
    assert merged["wal.path"] == "/quiver-wal"
    assert merged["storage.aws_region"] == "eu-west-1"


def test_the_kubernetes_profile_storage_keys_are_an_s3_clients() -> None:
    settings = load_profile(str(PROFILE))
    storage = {
        k.removeprefix(STORAGE_PREFIX): v
        for k, v in settings.items()
        if k.startswith(STORAGE_PREFIX)
    }
    assert storage == {"aws_region": "eu-west-1", "retry_timeout": "60s"}
    config, client = StorageOptions(storage).split("s3", environ={})
    assert config == {"aws_region": "eu-west-1"} and not client  # no secret in the file
    assert StorageOptions(storage).retry_timeout_s == 60


def test_the_profile_docs_kubernetes_shows_is_the_files() -> None:
    text = DOC.read_text()
    block = re.search(r"## 1\. The store profile\s+```yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/kubernetes.md section 1 shows the profile"
    shown = flatten(yaml.safe_load(block.group(1)))
    assert shown == flatten(yaml.safe_load(PROFILE.read_text()))
