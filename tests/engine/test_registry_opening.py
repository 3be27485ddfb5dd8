"""A caller that must create nothing (a batch read, a read task classifying a vanished
segment, ``quiver status``, ``quiver fsck``) opens a store's subscriber registry through
``open_registry``: None while the store has no ``subscribers/`` directory, and the
directory is not created."""

from __future__ import annotations

from pathlib import Path

from quiver_spark.subscribers import has_registry, open_registry
from quiver_spark.subscribers.journal import FileJournal
from tests.stores import int_segments


def test_a_store_without_subscribers_has_no_registry_and_gets_none(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)])
    assert not has_registry(str(tmp_path))
    assert open_registry(str(tmp_path), journal=FileJournal) is None
    assert not (tmp_path / "subscribers").exists()


def test_create_opens_a_new_registry_that_later_opens_find(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)])
    reg = open_registry(str(tmp_path), journal=FileJournal, create=True)
    assert reg is not None
    try:
        reg.register("s", retained={"p-0": [1]})
    finally:
        reg.close()
    assert has_registry(str(tmp_path))
    again = open_registry(str(tmp_path), journal=FileJournal)
    assert again is not None
    try:
        assert again.subscribers() == ["s"]
    finally:
        again.close()
