"""Tier-2 on a real S3 endpoint: finalized segments in S3, the WAL on local disk.

The endpoint is moto's S3 server, started by the test on 127.0.0.1 (a free port);
obstore (the client of every ``s3://`` location, a ``segment.path`` as a root) reads it
from ``AWS_ENDPOINT_URL`` (the environment carries endpoint and credentials to the
driver and its Python workers, as ``storage.*`` options would). Two tests:

* the Spark round trip: ``jobs/pipeline.py`` in ``local[2]`` from the fresh venv,
  the sink with ``segment.path=s3://bucket/quiver``, two subscribers (and in the
  soak tier a driver kill -9 mid-upload and a restart); every key exactly once at
  both subscribers,
  every segment both acked deleted from the bucket, and the bucket holds nothing
  but published pairs (``.arrow`` + ``.meta``);
* Upload failures against the same endpoint with the engine: the k-th mutating S3 request of a
  finalize fails, for every k, either before it was carried out or after (its answer
  lost). Readers never see a segment that is not whole, a retry in the same process
  publishes every row exactly once, and so does recovery after the writer is
  abandoned at the failure (a crash).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration.harness import FreshVenv, moto_s3
from integration.scenario import SINK_OPTIONS, Pipeline, assert_exactly_once
from quiver_spark import QuiverStore
from quiver_spark.config import SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects import ObjectStore
from quiver_spark.segment import SegmentLocation
from quiver_spark.segment.objects import BucketBackend


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Credentials and endpoint for obstore (and boto3), here and in every process we start."""
    env = {
        "AWS_ACCESS_KEY_ID": "quiver-test",
        "AWS_SECRET_ACCESS_KEY": "quiver-test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:
    import boto3

    name = f"quiver-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def bucket_keys(bucket: str, prefix: str) -> list[str]:
    import boto3

    client = boto3.client("s3")
    keys: list[str] = []
    token: dict[str, str] = {}
    for _ in range(1000):  # bounded pagination
        page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, **token)
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = {"ContinuationToken": page["NextContinuationToken"]}
    raise AssertionError("listing did not end")


def assert_only_published_pairs(keys: list[str]) -> dict[str, set[int]]:
    """Every object is ``<pid>/<seq>.arrow`` or ``.meta``, each with its partner, or a
    publication hint (``~hints/<pid>.<seq>.hint``, written before a publication and so
    possibly left by one that failed: ARCHITECTURE.md §12)."""
    arrows: dict[str, set[int]] = {}
    metas: dict[str, set[int]] = {}
    for key in keys:
        pid, name = key.split("/")[-2:]
        if pid == "~hints":
            assert re.fullmatch(r"[A-Za-z0-9_.-]+\.\d{20}\.hint|QUARANTINE", name), key
            continue
        stem, _, suffix = name.partition(".")
        assert stem.isdigit() and suffix in ("arrow", "meta"), f"stray object {key}"
        (arrows if suffix == "arrow" else metas).setdefault(pid, set()).add(int(stem))
    assert arrows == metas, f"unpaired segment objects: arrows {arrows}, metas {metas}"
    return metas


# -- the Spark round trip ------------------------------------------------------------


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "driver_kill",
    [False, pytest.param(True, marks=pytest.mark.soak)],
    ids=["no-kill", "driver-kill"],
)
def test_spark_round_trip_with_segments_in_s3_reclaims_remote_segments(
    java: str,
    fresh_venv: FreshVenv,
    s3_env: dict[str, str],
    bucket: str,
    tmp_path: Path,
    driver_kill: bool,
) -> None:
    del java
    url = f"s3://{bucket}/quiver"
    run = Pipeline(
        fresh_venv, "local[2]", None, tmp_path / "s3-pipeline", total=3000, rows_per_batch=300,
        sink_options={**SINK_OPTIONS, "segment.path": url},
        store_args=["--segments-path", url], env=s3_env,
    )  # fmt: skip
    try:
        run.start_driver()
        if driver_kill:  # soak tier: kill -9 while segments are being uploaded
            run.wait_until(run.progressed("fast", 0), "first rows at the fast subscriber", 300)
            run.kill_driver()
            run.start_driver()
        run.finish(420)
    finally:
        run.driver.stop()
    assert_exactly_once(run)

    remote = assert_only_published_pairs(bucket_keys(bucket, "quiver/"))
    local_segments = run.store / "segments"
    assert not local_segments.exists() or not any(local_segments.rglob("*.arrow")), (
        "segments were written locally although segment.path is in S3"
    )
    wal_dirs = sorted((run.store / "partitions").glob("*/wal"))
    assert wal_dirs, "the WAL should be on local disk under the store (partitions/<pid>/wal)"
    with QuiverStore.open(str(run.store), partition=None, create=False, background=False) as qs:
        assert qs.segments_url == url
        listed = {(m.partition, m.seq) for m in qs.segments()}
    assert listed == {(p, s) for p, seqs in remote.items() for s in seqs}
    print(
        f"[s3] segments left in s3://{bucket}/quiver: {len(listed)}; local WAL dirs {len(wal_dirs)}"
    )


# -- failed and unanswered uploads --------------------------------------------------


class UploadFault(OSError):
    """Injected failure of one S3 request."""


class FaultyRequests:
    """Makes the ``fail_at``-th mutating request (an upload or a delete) of a segments
    location's object store fail.

    A move is a get, an upload and a delete, so "copied but the source not deleted" is
    one of the points. ``landed`` carries the request out first and then raises (its
    answer lost: an S3 upload is whole or absent, never torn); otherwise it raises
    before sending anything.
    """

    MUTATING = ("put", "delete")

    def __init__(self, objects: ObjectStore, fail_at: int, landed: bool) -> None:
        self.objects = objects
        self.fail_at = fail_at
        self.landed = landed
        self.calls: list[str] = []
        self.fired = False

    def __enter__(self) -> FaultyRequests:
        for name in self.MUTATING:
            setattr(self.objects, name, self._wrap(name, getattr(self.objects, name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.MUTATING:
            self.objects.__dict__.pop(name, None)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{name} {args[0] if args else ''}")
            if len(self.calls) != self.fail_at:
                return original(*args, **kwargs)
            self.fired = True
            if self.landed:
                original(*args, **kwargs)
            raise UploadFault(f"injected failure of request {self.fail_at}: {self.calls[-1]}")

        return call


def _ids(store_url: str) -> list[int]:
    """Every id in the segments a fresh reader sees, each segment checksum-verified."""
    loc = SegmentLocation(store_url)
    ids: list[int] = []
    for part in loc.partitions():
        for meta in loc.list(part):
            with loc.open(meta, verify=True) as reader:
                rows = 0
                for batch in reader.batches():
                    rows += batch.num_rows
                    ids += pc.cast(batch.column("id"), pa.int64()).to_pylist()
                assert rows == meta.rows, f"{meta.partition}/{meta.seq}: {rows} != {meta.rows}"
    return ids


def _config(url: str) -> StoreConfig:
    return StoreConfig(
        wal=WalConfig(flush_interval_s=0.0),
        segment=SegmentConfig(path=url, max_open_duration_s=3600),
    )


def _batch(first: int, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(first, first + n), pa.int64()),
            "body": pa.array([f"row-{i}" for i in range(first, first + n)]),
        }
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("after", ["retry", "crash"])
@pytest.mark.parametrize("landed", [False, True], ids=["failed", "answer-lost"])
def test_failed_or_unanswered_segment_upload_to_s3_is_never_published_half_way(
    s3_env: dict[str, str], bucket: str, tmp_path: Path, landed: bool, after: str
) -> None:
    url = f"s3://{bucket}/t16"
    root = str(tmp_path / "store")
    appended: list[int] = []
    points = 0
    for fail_at in range(1, 21):  # until a finalize completes without reaching the fault
        store = QuiverStore.open(root, _config(url), partition="p-0", background=False)
        first = len(appended)
        store.append(_batch(first, 50))
        store.flush()
        appended += range(first, first + 50)
        assert store.writer is not None
        backend = store.segment_location.backend
        assert isinstance(backend, BucketBackend)
        with FaultyRequests(backend.objects, fail_at, landed) as fault:
            try:
                store.finalize()
            except UploadFault:
                pass
        visible = _ids(url)
        assert len(visible) == len(set(visible)), f"k={fail_at}: a reader sees duplicates"
        assert set(visible) <= set(appended)
        if not fault.fired:
            store.close()
            break
        points += 1
        if after == "retry":  # the same writer tries again, as its maintenance would
            store.finalize()
            store.close()
        else:  # abandoned at the failure: what a crash leaves; a new writer recovers
            store.writer.close(finalize=False)
            store.close()
            QuiverStore.open(root, _config(url), partition="p-0", background=False).close()
        ids = _ids(url)
        assert sorted(ids) == appended, (
            f"k={fail_at} ({fault.calls}): after {after}, rows "
            f"lost {sorted(set(appended) - set(ids))[:10]}, "
            f"duplicated {len(ids) - len(set(ids))}"
        )
    else:
        raise AssertionError("finalize never completed within 20 injection points")
    # a finalize uploads its .arrow then its .meta (each one request, whole or absent)
    assert points >= 2, f"only {points} mutating requests were exercised"
    with QuiverStore.open(root, _config(url), partition="p-0", background=False):
        pass  # recovery removes orphans of the failures
    assert_only_published_pairs(bucket_keys(bucket, "t16/"))
    print(
        f"[t16] {'unanswered' if landed else 'failed'} uploads then {after}: "
        f"{points}/{points} injection points, {len(appended)} rows exactly once"
    )
