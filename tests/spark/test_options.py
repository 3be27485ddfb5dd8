"""Spark option strings -> StoreConfig (every bad value is named, nothing touched)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiver_spark.config import SizeCapPolicy
from quiver_spark.errors import ConfigError
from quiver_spark.spark.options import spark_options, store_config, store_root

CONF = Path(__file__).resolve().parents[2] / "conf" / "quiver.yaml"

# (option, bad value, a phrase of the allowed values the message must contain)
BAD_VALUES = [
    ("retention.size_cap_policy", "drop_newest", "backpressure | drop_oldest"),
    ("retention.size_cap_policy", "", "backpressure | drop_oldest"),
    ("segment.target_size", "32XB", "units B, KB, MB, GB"),
    ("segment.target_size", "-1MB", "units B, KB, MB, GB"),
    ("segment.target_size", "0", "greater than zero"),
    ("segment.max_open_duration", "-5s", "units ms, s, m, h"),
    ("segment.max_open_duration", "5 fortnights", "units ms, s, m, h"),
    ("segment.max_open_duration", "0s", "greater than zero"),
    ("wal.flush_interval", "fast", "units ms, s, m, h"),
    ("wal.max_size", "4QB", "1024-based"),
    ("retention.size_cap", "lots", "units B, KB, MB, GB"),
    ("retention.max_age", "-3h", "a duration such as 25ms"),
    ("retention.max_age", "forever", "a duration such as 25ms"),
    ("retention.backpressure_timeout", "soon", "units ms, s, m, h"),
    ("segment.target_sise", "32MB", "unknown option"),
    ("wal.flush_intervall", "25ms", "unknown option"),
    ("retention.cap", "1GB", "unknown option"),
    ("segments.url", "s3://b", "unknown option"),
]


@pytest.mark.parametrize(("option", "value", "allowed"), BAD_VALUES)
def test_every_bad_option_value_names_option_value_and_allowed(option, value, allowed, tmp_path):
    root = tmp_path / "store"
    with pytest.raises(ConfigError) as err:
        store_config({"path": str(root), option: value})
    message = str(err.value)
    assert err.value.option == option
    assert repr(value) in message
    assert allowed in message
    assert not root.exists(), "validation touched the store"


def test_bad_value_table_covers_every_store_option_namespace():
    names = {o.split(".")[0] for o, _, _ in BAD_VALUES}
    assert names == {"segment", "segments", "wal", "retention"}


def test_missing_path_is_an_error_naming_the_path_option():
    with pytest.raises(ConfigError) as err:
        store_root({"segment.target_size": "32MB"})
    assert err.value.option == "path"
    assert "a store directory" in str(err.value)


def test_blank_path_is_rejected_like_a_missing_one():
    with pytest.raises(ConfigError, match="'path'"):
        store_root({"path": "  "})


def test_an_object_store_root_is_taken_and_another_url_is_refused_naming_the_schemes():
    assert store_root({"path": "s3://bucket/quiver/"}) == "s3://bucket/quiver"
    with pytest.raises(ConfigError, match=r"s3://bucket/prefix"):
        store_root({"path": "hdfs://nn/quiver"})


def test_store_root_is_absolute_and_accepts_file_urls(tmp_path):
    assert store_root({"path": f"file://{tmp_path}/q"}) == f"{tmp_path}/q"
    assert os.path.isabs(store_root({"path": "relative/q"}))


def test_spark_lower_cased_keys_parse_like_the_documented_names():
    cfg = store_config({"SEGMENT.TARGET_SIZE": "8MB", "segment.EVENT_TIME_COLUMN": "ts"})
    assert cfg.segment.target_size_bytes == 8 * 1024**2
    assert cfg.segment.event_time_column == "ts"


def test_defaults_are_the_documented_defaults():
    cfg = store_config({"path": "/q"})
    assert cfg.segment.target_size_bytes == 32 * 1024**2
    assert cfg.segment.max_open_duration_s == 5.0
    assert cfg.wal.flush_interval_s == 0.025
    assert cfg.wal.max_size_bytes == 4 * 1024**3
    assert cfg.retention.size_cap_policy is SizeCapPolicy.BACKPRESSURE


def test_spark_and_source_options_outside_store_namespaces_are_ignored():
    cfg = store_config({"path": "/q", "checkpointLocation": "/c", "subscriber": "exp"})
    assert cfg.segment.target_size_bytes == 32 * 1024**2


def test_example_yaml_config_is_read_in_the_pipeline_layout():
    opts = spark_options({"config": str(CONF)})
    assert opts["path"] == "/data/quiver"
    cfg = store_config({"config": str(CONF)})
    assert cfg.segment.target_size_bytes == 32 * 1024**2
    assert cfg.wal.max_size_bytes == 4 * 1024**3
    assert cfg.retention.backpressure_timeout_s == 30
    # the store's policy is left commented out: a shared profile must not contradict it
    assert cfg.retention.size_cap_bytes is None and cfg.retention.max_age_hours is None
    assert store_root({"config": str(CONF)}) == "/data/quiver"


def test_explicit_options_win_over_the_yaml_file():
    opts = {"config": str(CONF), "path": "/elsewhere", "Segment.Target_Size": "1MB"}
    cfg = store_config(opts)
    assert cfg.segment.target_size_bytes == 1024**2
    assert cfg.retention.backpressure_timeout_s == 30  # still from the file
    assert store_root(opts) == "/elsewhere"


def test_bad_value_inside_the_yaml_file_is_named(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("segment:\n  target_size: 32XB\n")
    with pytest.raises(ConfigError) as err:
        store_config({"config": str(path), "path": str(tmp_path / "s")})
    assert err.value.option == "segment.target_size" and "'32XB'" in str(err.value)


def test_unreadable_yaml_file_is_named_by_the_config_option(tmp_path):
    with pytest.raises(ConfigError) as err:
        store_config({"config": str(tmp_path / "missing.yaml")})
    assert err.value.option == "config"
