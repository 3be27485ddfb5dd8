"""`quiver subscribers URL add NAME --create --storage-option K=V` makes the store in a
bucket with the storage options given: the store's first objects are written with the
endpoint and credentials of the flags (nothing comes from the environment), and the
subscriber is registered there before any write."""

from __future__ import annotations

from quiver_spark import QuiverStore
from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .conftest import run

__all__ = ["moto_s3"]


def flags(options: dict[str, object]) -> list[str]:
    return [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]


def test_add_with_create_makes_the_store_in_the_bucket_with_the_storage_options(
    moto_s3: MotoS3,
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('cli-create')}/store"
    res = run(["subscribers", url, "add", "fast", "--create", *flags(moto_s3.options)])
    assert res.exit_code == 0, res.output + res.stderr
    with QuiverStore.open(
        url, partition=None, create=False, background=False, storage_options=moto_s3.options
    ) as store:
        assert store.subscribers.subscribers() == ["fast"]


def test_add_with_create_reaches_a_segment_path_bucket_with_the_storage_options(
    moto_s3: MotoS3, tmp_path: object
) -> None:
    """A POSIX root whose segments go to a bucket: the check that the bucket answers,
    before the store is made, uses the -S flags too (not the client's defaults)."""
    root = f"{tmp_path}/store"
    segments = f"{moto_s3.url}/{unique_prefix('cli-create-segs')}"
    res = run(
        [
            "subscribers", root, "add", "fast", "--create",
            "-o", f"segment.path={segments}", *flags(moto_s3.options),
        ]
    )  # fmt: skip
    assert res.exit_code == 0, res.output + res.stderr
    with QuiverStore.open(
        root, partition=None, create=False, background=False, storage_options=moto_s3.options
    ) as store:
        assert store.subscribers.subscribers() == ["fast"]
        assert store.segments_url == segments
