"""A ``segment.path`` on an object store (``s3://bucket/prefix`` beside a POSIX root) is
served by the client a root there uses (obstore), never by fsspec: a store writes,
reads, acknowledges and reclaims its segments there with s3fs not installed; its
``storage.*`` options are the root's (the same keys, checked the same way, the same
retry budget, the same environment fallback) and a mistake in them is the same one-line
error a root shows; the keys and bytes are those a POSIX or fsspec location holds, so
segments written there through s3fs read as before. ``memory://`` is the engine's
in-process store there as it is as a root; ``file://`` stays with the local file layer
and any other scheme with fsspec. Met for real against moto's S3 server."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import boto3
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import ConfigError, InvalidEndpointError, NoSuchBucketError
from quiver_spark.fs import DEFAULT_IO
from quiver_spark.objects import open_objects
from quiver_spark.objects.cloud import CloudObjects
from quiver_spark.options import store_config_from_options
from quiver_spark.segment import SegmentLocation
from quiver_spark.segment.backends import open_backend
from quiver_spark.segment.local import LocalBackend
from quiver_spark.segment.objects import BucketBackend
from quiver_spark.segment.remote import RemoteBackend
from quiver_spark.urls import check_url
from tests.engine.segment_helpers import FsspecMemoryFS, write_simple
from tests.moto_server import ACCESS_KEY_ID, BUCKET, SECRET, MotoS3, moto_s3, unique_prefix
from tests.stores import wal_in

__all__ = ["moto_s3"]

ENGINE_WITHOUT_S3FS = textwrap.dedent(
    """
    import sys
    sys.modules["s3fs"] = None  # `import s3fs` raises ImportError: as if not installed
    from quiver_spark import QuiverStore
    from quiver_spark.objects import open_objects
    from quiver_spark.options import store_config_from_options
    from quiver_spark.subscription import Subscription
    from tests.stores import acked_ids, id_batch, scanned_ids

    root, url = sys.argv[1], sys.argv[2]
    config = store_config_from_options(
        {"segment.path": url, "segment.max_open_duration": "1h", "wal.flush_interval": "0"}
    )
    with QuiverStore.open(root, config, partition="p-0", background=False) as store:
        for lo in (0, 10, 20):
            store.append(id_batch(lo, 10))
            store.flush()
            store.finalize()
        print("written", [m.seq for m in store.segments()], flush=True)
    print("in the bucket", len(open_objects(url).list("p-0/")), flush=True)
    with QuiverStore.open(root, partition=None, create=False, background=False) as store:
        print("scanned", len(scanned_ids(store)), store.segments_url == url, flush=True)
    with Subscription.open(root, "s") as sub:
        print("acked", len(acked_ids(sub)), flush=True)
    print("s3fs", sys.modules["s3fs"] is None, flush=True)
    """
)


def _segments_url(prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}/segs"


def _client(moto: MotoS3) -> Any:
    return boto3.client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET,
    )  # fmt: skip


def _keys(moto: MotoS3, prefix: str) -> list[str]:
    """The segment files under ``prefix`` (a partition's publication hint is not one)."""
    page = _client(moto).list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
    return sorted(o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith(".hint"))


def _config(url: str) -> Any:
    return store_config_from_options({"segment.path": url, "segment.max_open_duration": "1h"})


def test_a_store_keeps_its_segments_in_a_bucket_with_s3fs_not_installed(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    """Credentials, endpoint and region come from the environment alone, as a root's
    would; every segment acknowledged by the only subscriber leaves the bucket."""
    prefix = unique_prefix("segpath")
    url = _segments_url(prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "PYTHONPATH": os.getcwd(),
        "AWS_ENDPOINT": moto_s3.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    run = subprocess.run(
        [sys.executable, "-c", ENGINE_WITHOUT_S3FS, str(tmp_path / "store"), url],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "written [1, 2, 3]", "in the bucket 6", "scanned 30 True", "acked 30", "s3fs True",
    ]  # fmt: skip
    assert not (tmp_path / "store" / "segments").exists(), "segments written locally"
    assert _keys(moto_s3, prefix) == [], "acknowledged segments are still in the bucket"


def test_segments_keep_the_keys_and_bytes_a_posix_location_holds(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    """What s3fs wrote (``<prefix>/<pid>/<seq>.arrow`` and ``.meta``: the names and bytes
    a POSIX location holds) is listed, read and verified as before, and a new segment
    lands under the same kind of key with the same bytes."""
    prefix = unique_prefix("bytes")
    local = SegmentLocation(str(tmp_path / "segs"))
    written = [write_simple(local, seq) for seq in (1, 2)]
    client = _client(moto_s3)
    files = sorted((tmp_path / "segs" / "p0").iterdir())
    assert [f.name for f in files] == [f"{s:020d}.{x}" for s in (1, 2) for x in ("arrow", "meta")]
    for f in files[:2]:  # seq 1, as s3fs uploaded it
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/segs/p0/{f.name}", Body=f.read_bytes())
    remote = SegmentLocation(_segments_url(prefix), storage_options=moto_s3.options)
    assert isinstance(remote.backend, BucketBackend)
    assert remote.list("p0") == written[:1]
    with remote.open(written[0]) as got, local.open(written[0]) as expected:
        assert got.read_all().equals(expected.read_all())
    again = write_simple(remote, 2)
    assert dataclasses.replace(again, created_ns=0) == dataclasses.replace(written[1], created_ns=0)
    assert _keys(moto_s3, prefix) == [f"{prefix}/segs/p0/{f.name}" for f in files]
    arrow = client.get_object(Bucket=BUCKET, Key=f"{prefix}/segs/p0/{files[2].name}")
    assert arrow["Body"].read() == files[2].read_bytes()
    meta = client.get_object(Bucket=BUCKET, Key=f"{prefix}/segs/p0/{files[3].name}")
    assert meta["Body"].read() == again.encode()


def test_a_missing_segment_path_bucket_is_the_one_line_error_a_root_shows(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    root_url = f"s3://nosuchbucket/{unique_prefix('root')}"
    with pytest.raises(NoSuchBucketError) as as_root:
        QuiverStore.open(
            root_url, wal_in(tmp_path / "wal"), partition="p-0", background=False,
            storage_options=moto_s3.options,
        ).close()  # fmt: skip
    seg_url = "s3://nosuchbucket/segs"
    with pytest.raises(NoSuchBucketError) as as_segments:
        QuiverStore.open(
            str(tmp_path / "store"), _config(seg_url), partition="p-0", background=False,
            storage_options=moto_s3.options,
        ).close()  # fmt: skip
    shown = str(as_segments.value)
    assert "\n" not in shown and SECRET not in shown and ACCESS_KEY_ID not in shown
    assert as_segments.value.setting == "segment.path" and as_root.value.setting == "path"
    assert shown.replace(seg_url, "URL").replace("in segment.path", "in the path") == str(
        as_root.value
    ).replace(root_url, "URL")
    assert shown.startswith(f"bucket 'nosuchbucket' does not exist at {moto_s3.endpoint} ")


def test_storage_options_mean_for_a_segment_path_what_they_mean_for_a_root(
    moto_s3: MotoS3,
) -> None:
    url = _segments_url(unique_prefix("opts"))
    for opts in ({"key": "x"}, {"storage.aws_endpoitn": moto_s3.endpoint}):  # s3fs's, a typo
        with pytest.raises(ConfigError) as as_segments:
            open_backend(url, io=DEFAULT_IO, storage_options=opts)
        with pytest.raises(ConfigError) as as_root:
            open_objects(f"s3://{BUCKET}/root", opts)
        assert str(as_segments.value) == str(as_root.value)
        assert as_segments.value.option == as_root.value.option
        assert as_segments.value.option.startswith("storage.")  # as the user spells it
    opts = {**moto_s3.options, "retry_timeout": "7s"}
    backend = open_backend(url, io=DEFAULT_IO, storage_options=opts)
    assert isinstance(backend, BucketBackend) and isinstance(backend.objects, CloudObjects)
    assert backend.objects.budget.timeout_s == open_objects(url, opts).budget.timeout_s == 7.0


@pytest.mark.parametrize(
    ("url", "kind"),
    [("s3://bucket/segs", BucketBackend), ("s3a://bucket/segs", BucketBackend),
     ("gs://bucket/segs", BucketBackend), ("memory://segs", BucketBackend),
     (f"{FsspecMemoryFS.protocol}://segs", RemoteBackend),
     ("file:///tmp/segs", LocalBackend), ("/tmp/segs", LocalBackend)],
)  # fmt: skip
def test_object_store_urls_go_to_obstore_and_others_stay_with_fsspec_or_the_file_layer(
    url: str, kind: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    assert check_url("segment.path", url) == url
    assert type(open_backend(url, io=DEFAULT_IO)) is kind


def test_an_object_store_segment_path_with_credentials_in_it_is_refused_as_a_root_is() -> None:
    for url in ("s3://AKIAEXAMPLE:hunter2@bucket/segs", "s3:///segs"):
        with pytest.raises(ConfigError, match=r"'segment\.path'") as e:
            check_url("segment.path", url)
        assert "hunter2" not in str(e.value) and "AKIAEXAMPLE" not in str(e.value)


def test_a_storage_option_a_segment_path_cannot_take_makes_no_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for opts in ({"key": "x"}, {"aws_endpoint": "minio:9000"}):  # s3fs's key, no scheme
        with pytest.raises((ConfigError, InvalidEndpointError)):
            QuiverStore.open(str(root), _config("s3://bucket/segs"), partition=None,
                             background=False, storage_options=opts)  # fmt: skip
        assert not root.exists()
