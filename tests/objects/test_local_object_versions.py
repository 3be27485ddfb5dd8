"""A POSIX root's versions name exactly the bytes they were read with and never come
back while the key exists: a replace of a key another writer replaced in between is
refused, however fast the writes and whatever inode numbers the filesystem reuses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark.errors import VersionMismatch
from quiver_spark.fs import FileIO
from quiver_spark.objects.local import LocalObjects


def test_versions_of_same_size_rewrites_never_repeat(tmp_path: Path) -> None:
    """Each replace frees the old inode, which the next one may reuse within the same
    timestamp tick: the version must still be new."""
    store = LocalObjects(str(tmp_path))
    version = store.create("LEASE", b"holder-000")
    seen = {version}
    for i in range(1, 300):
        version = store.replace("LEASE", f"holder-{i:03d}".encode(), version=version)
        assert version not in seen, f"write {i} repeated an earlier version"
        seen.add(version)


class _OtherWriterAt(FileIO):
    """Runs ``action`` in another thread the first time operation ``op`` on a path
    ending with ``suffix`` is about to happen, and lets it finish or block (on the
    store's lock) for a moment before the operation goes on."""

    def __init__(self, op: str, suffix: str, action: Callable[[], None]) -> None:
        super().__init__()
        self.op, self.suffix, self.action = op, suffix, action
        self.armed = False
        self.thread: threading.Thread | None = None

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if self.armed and op == self.op and path.endswith(self.suffix):
            self.armed = False
            self.thread = threading.Thread(target=self.action)
            self.thread.start()
            self.thread.join(0.5)  # done, or waiting for the lock the caller holds

    def finish(self) -> None:
        if self.thread is not None:
            self.thread.join()


def test_a_get_racing_a_replace_returns_the_version_of_the_bytes_it_returns(
    tmp_path: Path,
) -> None:
    versions: dict[bytes, str] = {}

    def other_writer() -> None:
        other = LocalObjects(str(tmp_path))
        versions[b"policy-B"] = other.replace("POLICY", b"policy-B", version=versions[b"policy-A"])

    io = _OtherWriterAt("stat", "POLICY", other_writer)
    store = LocalObjects(str(tmp_path), io)
    versions[b"policy-A"] = store.create("POLICY", b"policy-A")
    io.armed = True
    got = store.get("POLICY")
    io.armed = False
    io.finish()
    assert got is not None
    assert got.version == versions[got.data]


def test_a_create_racing_a_replace_returns_the_version_of_its_own_bytes(tmp_path: Path) -> None:
    def other_writer() -> None:
        other = LocalObjects(str(tmp_path))
        current = other.get("STORE")
        assert current is not None
        other.replace("STORE", b"schema-B", version=current.version)

    io = _OtherWriterAt("fsync_dir", "", other_writer)
    store = LocalObjects(str(tmp_path), io)
    io.mkdir(str(tmp_path))
    io.armed = True
    created = store.create("STORE", b"schema-A")
    io.finish()
    # the replace came after the create: a replace at the create's version must fail
    with pytest.raises(VersionMismatch):
        store.replace("STORE", b"schema-C", version=created)


def test_a_delete_between_a_replaces_check_and_write_is_not_undone(tmp_path: Path) -> None:
    io = _OtherWriterAt(
        "open", "HEARTBEAT.tmp", lambda: LocalObjects(str(tmp_path)).delete("HEARTBEAT")
    )
    store = LocalObjects(str(tmp_path), io)
    v = store.create("HEARTBEAT", b"beat-1")
    io.armed = True
    try:
        store.replace("HEARTBEAT", b"beat-2", version=v)
        replaced = True
    except VersionMismatch:
        replaced = False
    io.finish()
    # the replace came first (the delete then removed its bytes) or the delete did (the
    # replace then found no object): never bytes that outlive a later delete
    assert replaced and store.get("HEARTBEAT") is None
