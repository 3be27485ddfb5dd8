"""A root's URL alone chooses its object store, and its storage options are shown
without their secrets wherever a user could see them (repr, str, redact)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.objects import StorageOptions, open_objects, redact
from quiver_spark.objects.cloud import CloudObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.urls import is_object_url

OPTIONS = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws_session_token": "FwoGZXIvYXdzEXAMPLETOKEN",
    "azure_storage_sas_token": "sv=2021&sig=abcdefSECRET",
    "google_service_account_key": '{"private_key": "-----BEGIN"}',
    "aws_endpoint": "http://minio:9000",
    "aws_region": "us-east-1",
}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://b/p", True),
        ("S3A://b/p", True),
        ("gs://b/p", True),
        ("gcs://b/p", True),
        ("az://acct/c/p", True),
        ("abfs://c@acct.dfs.core.windows.net/p", True),
        ("abfss://c@acct.dfs.core.windows.net/p", True),
        ("memory://name/p", True),
        ("/data/q", False),
        ("file:///data/q", False),
        ("hdfs://nn/q", False),
    ],
)
def test_object_urls_are_told_from_local_paths(url: str, expected: bool) -> None:
    assert is_object_url(url) is expected


def test_the_url_alone_chooses_the_object_store(tmp_path: Path) -> None:
    assert isinstance(open_objects(str(tmp_path)), LocalObjects)
    local = open_objects(f"file://{tmp_path}/root")
    assert isinstance(local, LocalObjects) and local.url == str(tmp_path / "root")
    memory = open_objects("memory://urls-test/some/prefix")
    assert isinstance(memory, MemoryObjects) and memory.url == "memory://urls-test/some/prefix"
    cloud = open_objects("s3://bucket/root", {"aws_region": "us-east-1", "skip_signature": "true"})
    assert isinstance(cloud, CloudObjects) and cloud.url == "s3://bucket/root"


def test_secrets_are_never_shown_and_key_ids_only_partly() -> None:
    shown = redact(OPTIONS)
    assert shown["aws_access_key_id"] == "AKIA...MPLE"
    for k in ("aws_secret_access_key", "aws_session_token", "azure_storage_sas_token"):
        assert shown[k] == "***"
    assert shown["google_service_account_key"] == "***"
    assert shown["aws_endpoint"] == "http://minio:9000"
    opts = StorageOptions(OPTIONS)
    aws = {k: v for k, v in OPTIONS.items() if k.startswith("aws_")}
    for text in (repr(opts), str(opts), repr(open_objects("s3://b/p", aws))):
        for secret in list(OPTIONS.values())[:5]:
            assert secret not in text


def test_credentials_inside_an_endpoint_url_are_not_shown() -> None:
    assert redact({"proxy_url": "http://user:pw@proxy:3128"}) == {
        "proxy_url": "http://***@proxy:3128"
    }


def test_options_of_another_cloud_or_of_a_memory_root_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"'azure_storage_account_key'.*s3:// URLs"):
        open_objects("s3://b/p", {"azure_storage_account_key": "x"})
    with pytest.raises(ConfigError, match="no storage options for memory:// roots"):
        open_objects("memory://m/p", {"aws_region": "us-east-1"})
