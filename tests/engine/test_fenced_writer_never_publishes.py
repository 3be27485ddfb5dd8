"""A writer whose lease moved to a successor publishes nothing, and never stops the
successor from publishing.

On an object root the partition's MANIFEST is the publication point (ARCHITECTURE.md
§11.3): a writer that paused past its lease's ttl (a zombie) and resumes after a
successor took the partition over is fenced at its manifest step, so the segment files
it created before that step are not published: no reader sees their rows, and the
successor's own segments (which use the seqs above the manifest's ``high``) are
published as if the zombie had never written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription
from tests.stores import (
    acked_ids,
    fenced_finalize,
    id_batch,
    scanned_ids,
    taken_over_after_publishing,
    wal_in,
)

ROOT = "memory://zb/s"


pytestmark = pytest.mark.usefixtures("fresh_memory")


def test_rows_a_fenced_writer_sealed_after_its_lease_moved_are_never_read(
    tmp_path: Path,
) -> None:
    zombie, _successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-r"), partition=None, create=False) as reader:
        assert scanned_ids(reader) == [0, 1, 2]
        assert [m.seq for m in reader.segments("p-0")] == [1]


def test_the_successor_publishes_its_rows_after_a_fenced_writer_left_a_segment_behind(
    tmp_path: Path,
) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    successor.append(id_batch(200, 3))
    successor.flush()
    meta = successor.finalize()
    assert meta is not None
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-r"), partition=None, create=False) as reader:
        assert scanned_ids(reader) == [0, 1, 2, 200, 201, 202]


def test_a_subscriber_never_reads_rows_a_fenced_writer_sealed_after_its_lease_moved(
    tmp_path: Path,
) -> None:
    zombie, _successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    handle = QuiverStore.open(ROOT, wal_in(tmp_path / "wal-r"), partition=None, create=False)
    with Subscription(handle, "fwd", owns_store=True) as sub:
        sub.start("earliest")
        assert sorted(acked_ids(sub)) == [0, 1, 2]
