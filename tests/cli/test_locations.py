"""Store roots and segment locations the CLI cannot use: one line naming the fix, no
traceback, and a failed ``--create`` leaves nothing behind."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractFileSystem

from quiver_spark import QuiverStore
from quiver_spark.options import store_config_from_options
from tests.moto_server import MotoS3, moto_s3

from .conftest import Built, run, run_json, tree

__all__ = ["moto_s3"]

OCI_FIX = "pip install ocifs"
LOADED = sys.modules["fsspec.registry"]._registry  # backend classes fsspec has imported


@pytest.fixture
def no_ocifs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as one where ocifs (fsspec's ``oci://``) is not installed."""
    monkeypatch.setitem(sys.modules, "ocifs", None)  # import ocifs -> ImportError
    monkeypatch.delitem(LOADED, "oci", raising=False)
    yield


def _one_clean_line(text: str) -> None:
    assert "Traceback" not in text
    assert len(text.strip().splitlines()) == 1, text


def test_a_store_root_given_as_a_file_url_works(built: Built) -> None:
    doc = run_json(["status", f"file://{built.root}"])
    assert doc["path"] == str(built.root) and doc["totals"]["segments"] == 6


@pytest.mark.parametrize(
    ("path", "says"),
    [("hdfs://nn/store", "a local directory, a file:// URL or an object-store URL"),
     ("dbfs:/mnt/q", "/dbfs/mnt/q"),
     ("file://otherhost/data", "file:///absolute/path")],
)  # fmt: skip
def test_a_store_root_that_is_neither_local_nor_an_object_store_is_refused_in_one_line(
    path: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (["status", path], ["subscribers", path, "add", "x", "--create"]):
        res = run(argv)
        assert res.exit_code == 2, res.output
        assert f"{path} is not a store root" in res.stderr and says in res.stderr
        _one_clean_line(res.stderr)
    assert list(tmp_path.iterdir()) == [], "nothing created (dbfs: is no relative directory)"


def test_segments_on_an_fsspec_filesystem_not_installed_name_the_package(
    built: Built, no_ocifs: None
) -> None:
    before = tree(built.root)
    res = run(["status", built.root, "--segments-path", "oci://bucket@ns/prefix"])
    assert res.exit_code == 2 and OCI_FIX in res.stderr
    _one_clean_line(res.stderr)
    assert tree(built.root) == before


@pytest.mark.parametrize(
    ("url", "says"),
    [("oci://bucket@ns/prefix", OCI_FIX),
     ("s3://AKIAX:hunter2@bucket/prefix", "a URL without credentials in it"),
     ("s3a:///prefix", "a URL with a bucket after s3a://"),
     ("gopher://host/x", "gopher:// is none of them"),
     ("dbfs:/mnt/q", "/dbfs/mnt/q"),
     ("s3:/bucket/prefix", "s3://bucket/prefix"),
     ("s3://", "s3://bucket/prefix")],
)  # fmt: skip
def test_a_failed_create_leaves_no_half_made_store(
    url: str, says: str, tmp_path: Path, no_ocifs: None
) -> None:
    root = tmp_path / "store"
    res = run(["subscribers", root, "add", "exporter", "--create", "-o", f"segment.path={url}"])
    assert res.exit_code == 2, res.output
    assert "segment.path" in res.stderr and says in res.stderr
    _one_clean_line(res.stderr)
    assert not root.exists()
    again = run(["status", root])  # nothing half-made that later commands trip over
    assert again.exit_code == 2 and "no such directory" in again.stderr


def test_a_store_whose_recorded_backend_is_missing_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    fsspec.register_implementation("oci", _Installed, clobber=True)  # ocifs here
    cfg = store_config_from_options({"segment.path": "oci://bucket@ns/prefix"})
    QuiverStore.open(str(root), cfg, partition=None, background=False).close()
    monkeypatch.setitem(sys.modules, "ocifs", None)  # and gone
    monkeypatch.delitem(LOADED, "oci", raising=False)
    for argv in (["status", root], ["subscribers", root, "list"], ["gc", root], ["fsck", root],
                 ["txns", root, "list"], ["config", root], ["metrics", root]):  # fmt: skip
        res = run(argv)
        assert res.exit_code == 1, (argv, res.output)
        assert "keeps its segments at oci://bucket@ns/prefix" in res.stderr, argv
        assert OCI_FIX in res.stderr
        _one_clean_line(res.stderr)


class _Installed(MemoryFileSystem):  # type: ignore[misc]
    protocol = "oci"


class _Unreachable(AbstractFileSystem):  # type: ignore[misc]
    protocol = "unreachable"

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        raise ConnectionError("Could not connect to the endpoint URL:\n  http://10.0.0.1:9000/")


def test_a_store_whose_segments_cannot_be_reached_fails_in_one_line(tmp_path: Path) -> None:
    fsspec.register_implementation("unreachable", _Unreachable, clobber=True)
    root = tmp_path / "store"
    cfg = store_config_from_options({"segment.path": "unreachable://bucket/prefix"})
    QuiverStore.open(str(root), cfg, partition=None, background=False).close()
    for argv in (["status", root], ["subscribers", root, "add", "x"], ["gc", root]):
        res = run(argv)
        assert res.exit_code == 1, (argv, res.output)
        assert "keeps its segments at unreachable://bucket/prefix" in res.stderr
        assert "cannot be reached: ConnectionError: Could not connect" in res.stderr
        _one_clean_line(res.stderr)


def test_a_segment_path_bucket_that_does_not_exist_is_the_one_line_a_root_s_is(
    tmp_path: Path, moto_s3: MotoS3
) -> None:
    """The same storage options, the same error (the bucket named, what to correct) and
    the same exit code as a root in a bucket that does not exist."""
    flags = [a for k, v in moto_s3.options.items() for a in ("-S", f"{k}={v}")]
    root = tmp_path / "store"
    cfg = store_config_from_options({"segment.path": "s3://nosuchbucket/segs"})
    QuiverStore.open(str(root), cfg, partition=None, background=False,
                     storage_options=moto_s3.options).close()  # fmt: skip
    as_segments = run(["status", root, *flags])
    as_root = run(["status", "s3://nosuchbucket/store", *flags])
    for res in (as_segments, as_root):
        assert res.exit_code == 2, res.output
        _one_clean_line(res.stderr)
        assert f"bucket 'nosuchbucket' does not exist at {moto_s3.endpoint}" in res.stderr
    assert "cannot be reached: NoSuchBucketError" in as_segments.stderr
    assert "correct the bucket in segment.path" in as_segments.stderr
