"""On an object root, removing what is known to go is one DELETE per object and
nothing before it (ARCHITECTURE.md §12, §15.1): a publication's removal of the older
hint and retention's deletion of a segment's ``.meta`` and ``.arrow`` ask no HEAD
first; only the cleanup of a partition's leftovers, which reports what it removed,
asks whether each object exists."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.layout import hint_name
from quiver_spark.objects import ObjectStore
from quiver_spark.objects.base import CountingObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.segment.objects import ObjectBackend
from tests.stores import counted_opens, wal_in

_BUCKETS = itertools.count()


class _Asked(CountingObjects):
    """Every HEAD and DELETE, with its key."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.asked: list[tuple[str, str]] = []

    def head(self, key: str) -> str | None:
        self.asked.append(("HEAD", key))
        return super().head(key)

    def info(self, key: str):  # type: ignore[no-untyped-def]
        self.asked.append(("HEAD", key))
        return super().info(key)

    def delete(self, key: str) -> None:
        self.asked.append(("DELETE", key))
        super().delete(key)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[_Asked]:
    return counted_opens(monkeypatch, _Asked)


def _seal(w: QuiverStore) -> None:
    w.append(pa.record_batch({"id": pa.array(range(3), pa.int64())}))
    w.flush()
    w.finalize()


def test_a_publication_deletes_the_older_hint_without_asking_for_it_first(
    tmp_path: Path, asked: list[_Asked]
) -> None:
    url = f"memory://removal-{next(_BUCKETS)}/store"
    with QuiverStore.open(url, wal_in(tmp_path / "wal"), partition="w-0", background=False) as w:
        _seal(w)
        (objects,) = asked
        objects.asked.clear()
        _seal(w)
        hints = [(op, key) for op, key in objects.asked if key.endswith(".hint")]
    assert hints == [("DELETE", f"segments/~hints/{hint_name('w-0', 1)}")]


def test_retention_deletes_a_segment_with_one_delete_per_file_and_no_head(
    tmp_path: Path, asked: list[_Asked]
) -> None:
    url = f"memory://removal-{next(_BUCKETS)}/store"
    with QuiverStore.open(url, wal_in(tmp_path / "wal"), partition="w-0", background=False) as w:
        _seal(w)
        _seal(w)
        (objects,) = asked
        objects.asked.clear()
        w.segment_location.delete("w-0", [1])
        files = [(op, key) for op, key in objects.asked if key.startswith("segments/w-0/")]
        assert sorted(files) == [
            ("DELETE", "segments/w-0/00000000000000000001.arrow"),
            ("DELETE", "segments/w-0/00000000000000000001.meta"),
        ]
        assert [s.seq for s in w.segments()] == [2]


def test_the_cleanup_of_a_partitions_leftovers_still_reports_what_it_removed() -> None:
    objects = _Asked(MemoryObjects(f"removal-{next(_BUCKETS)}", "store"))
    backend = ObjectBackend(objects, "segments")
    left = backend.join("p-0", "00000000000000000003.arrow.tmp")
    objects.put(left, b"half")
    never = backend.join("p-0", "00000000000000000004.arrow.tmp")
    assert backend.remove_found([left, never]) == [left]
    assert objects.asked == [("HEAD", left), ("HEAD", never), ("DELETE", left), ("DELETE", never)]
