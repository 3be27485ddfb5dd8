"""Every file-layer call goes through the ``before`` hook, advisory writes and
read-only probes included, so an injected fault reaches them like any other I/O."""

from __future__ import annotations

import errno
import os

import pytest

from tests.faults import FaultyIO


def test_listdir_exists_and_size_are_seen_by_the_hook(tmp_path):
    (tmp_path / "a").write_bytes(b"xyz")
    io = FaultyIO()
    assert io.listdir(str(tmp_path)) == ["a"]
    assert io.exists(str(tmp_path / "a"))
    assert io.size(str(tmp_path / "a")) == 3
    assert [(t.op, os.path.basename(t.path)) for t in io.trace] == [
        ("listdir", tmp_path.name),
        ("stat", "a"),
        ("stat", "a"),
    ]


def test_a_fault_on_a_directory_listing_surfaces(tmp_path):
    io = FaultyIO()
    io.fail("listdir", 1, errno.EIO)
    with pytest.raises(OSError) as e:
        io.listdir(str(tmp_path))
    assert e.value.errno == errno.EIO


def test_an_advisory_write_is_traced_and_can_fail(tmp_path):
    path = str(tmp_path / "writer-p-0.prom")
    io = FaultyIO()
    io.write_advisory(path, b"quiver_appends_total 1\n")
    assert [t.op for t in io.trace] == ["open", "write", "rename"]
    with open(path, "rb") as f:
        assert f.read() == b"quiver_appends_total 1\n"
    io.fail("write", 1, errno.ENOSPC, kind="metrics")
    with pytest.raises(OSError) as e:
        io.write_advisory(path, b"quiver_appends_total 2\n")
    assert e.value.errno == errno.ENOSPC
    with open(path, "rb") as f:
        assert f.read() == b"quiver_appends_total 1\n"  # the old exposition stands
