"""Store roots and segment locations the CLI cannot use: one line naming the fix, no
traceback, and a failed ``--create`` leaves nothing behind."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.spec import AbstractFileSystem

from quiver_spark import QuiverStore
from quiver_spark.options import store_config_from_options

from .conftest import Built, run, run_json, tree

S3_FIX = "pip install 'quiver-spark[s3]'"
LOADED = sys.modules["fsspec.registry"]._registry  # backend classes fsspec has imported


@pytest.fixture
def no_s3fs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as one where s3fs is not installed."""
    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs -> ImportError
    monkeypatch.delitem(LOADED, "s3", raising=False)
    monkeypatch.delitem(LOADED, "s3a", raising=False)
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


def test_segments_on_s3_without_s3fs_name_the_extra(built: Built, no_s3fs: None) -> None:
    before = tree(built.root)
    res = run(["status", built.root, "--segments-path", "s3://bucket/prefix"])
    assert res.exit_code == 2 and S3_FIX in res.stderr
    _one_clean_line(res.stderr)
    assert tree(built.root) == before


@pytest.mark.parametrize(
    ("url", "says"),
    [("s3://bucket/prefix", S3_FIX),
     ("s3a://bucket/prefix", S3_FIX),
     ("gopher://host/x", "gopher:// is none of them"),
     ("dbfs:/mnt/q", "/dbfs/mnt/q"),
     ("s3:/bucket/prefix", "s3://bucket/prefix"),
     ("s3://", "s3://bucket/prefix")],
)  # fmt: skip
def test_a_failed_create_leaves_no_half_made_store(
    url: str, says: str, tmp_path: Path, no_s3fs: None
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
    cfg = store_config_from_options({"segment.path": "s3://bucket/prefix"})
    QuiverStore.open(str(root), cfg, partition=None, background=False).close()  # s3fs here
    monkeypatch.setitem(sys.modules, "s3fs", None)
    monkeypatch.delitem(LOADED, "s3", raising=False)
    for argv in (["status", root], ["subscribers", root, "list"], ["gc", root], ["fsck", root],
                 ["txns", root, "list"], ["config", root], ["metrics", root]):  # fmt: skip
        res = run(argv)
        assert res.exit_code == 1, (argv, res.output)
        assert "keeps its segments at s3://bucket/prefix" in res.stderr, argv
        assert S3_FIX in res.stderr
        _one_clean_line(res.stderr)


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
