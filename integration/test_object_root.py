"""Nothing shared but a bucket: the store's root on S3 (moto's server on 127.0.0.1).

The Spark pipeline of ``jobs/pipeline.py`` from the fresh venv, in ``local[2]``: a
producer writes with ``.start('s3://bucket/store')`` and two subscribers read the
same URL. Endpoint and credentials reach the driver and its Python workers only as
``storage.<key>`` options (the environment carries no AWS setting) and the CLI's
``--storage-option``. Every key reaches each subscriber exactly once, the segments
both acknowledged are reclaimed from the bucket, no store directory exists on local
disk (the WAL lives in the cache directory), and the secret appears in no log.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness import FreshVenv, moto_s3
from integration.scenario import Pipeline, assert_exactly_once

SECRET = "quiver-secret-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="quiver-test",
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


def bucket_keys(endpoint: str, bucket: str, prefix: str) -> list[str]:
    pages = (
        _client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    )
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.mark.timeout(900)
def test_spark_producer_and_two_subscribers_with_the_root_in_s3_are_exactly_once(
    java: str,
    fresh_venv: FreshVenv,
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    del java
    for k in [k for k in os.environ if k.startswith("AWS_")]:  # e.g. a CA bundle of the host
        monkeypatch.delenv(k)
    bucket = f"quiver-{uuid.uuid4().hex[:12]}"
    _client(s3_endpoint).create_bucket(Bucket=bucket)
    storage = {
        "aws_endpoint": s3_endpoint,
        "aws_access_key_id": "quiver-test",
        "aws_secret_access_key": SECRET,
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }
    child_env = fresh_venv.env()
    assert not [k for k in child_env if k.startswith("AWS_")], "the test needs no AWS_* variable"
    cache = tmp_path / "cache"
    run = Pipeline(
        fresh_venv, "local[2]", None, tmp_path / "run", total=3000, rows_per_batch=300,
        store_url=f"s3://{bucket}/store", storage_options=storage,
        env={"XDG_CACHE_HOME": str(cache)},
    )  # fmt: skip
    try:
        run.start_driver()
        run.finish(480)
    finally:
        run.driver.stop()
    assert_exactly_once(run)

    keys = bucket_keys(s3_endpoint, bucket, "store/")
    assert "store/STORE" in keys
    assert any(k.startswith("store/subscribers/") for k in keys), keys[:20]
    assert not (tmp_path / "run" / "store").exists(), "a local store directory was created"
    # the writers' WAL directories (their files go once every row is in a segment)
    wal = [p for p in cache.glob("quiver-spark/wal/*/*/wal") if p.is_dir()]
    assert wal, f"the WAL should be in the local cache directory {cache}"
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").glob("driver-*.log"))
    assert SECRET not in logs, "the secret access key appeared in the driver's log"
    status = fresh_venv.quiver(
        "status", f"s3://{bucket}/store", "--json",
        *(a for k, v in storage.items() for a in ("--storage-option", f"{k}={v}")),
    )  # fmt: skip
    assert SECRET not in status
    print(f"[s3-root] objects in the bucket at the end: {len(keys)}")
