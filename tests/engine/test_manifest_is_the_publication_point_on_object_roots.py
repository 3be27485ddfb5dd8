"""On an object root a segment is published iff its partition's MANIFEST lists it.

A writer whose lease was taken over (a zombie) may still create segment objects
before it is fenced; they are orphans: no reader, listing or subscriber ever returns
their rows, the successor never reuses their seq (it records the seq void and
publishes at the next one, so subscribers neither wait for it nor report it lost),
and ``quiver gc --full`` removes them and nothing published (ARCHITECTURE.md §11.3).
A writer's own crash between its ``.meta`` and its manifest step is finished by its
next open, from its STATE: nothing is lost and nothing is read twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.cli.gc import run_gc
from quiver_spark.dataloss import evidence
from quiver_spark.errors import LeaseLostError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from tests.stores import (
    acked_ids,
    fenced_finalize,
    id_batch,
    scanned_ids,
    taken_over_after_publishing,
    wal_in,
)

ROOT = "memory://pp/s"
MANIFEST_KEY = "partitions/p-0/MANIFEST"


pytestmark = pytest.mark.usefixtures("fresh_memory")


def objects() -> MemoryObjects:
    return MemoryObjects("pp", "s")


def segment_seqs() -> list[int]:
    return sorted(
        {int(o.key.rsplit("/", 1)[1].split(".")[0]) for o in objects().list("segments/p-0/")}
    )


def reader(tmp_path: Path) -> QuiverStore:
    return QuiverStore.open(ROOT, wal_in(tmp_path / "wal-r"), partition=None, create=False)


def write(store: QuiverStore, lo: int, n: int = 3) -> int:
    store.append(id_batch(lo, n))
    store.flush()
    meta = store.finalize()
    assert meta is not None
    return meta.seq


def test_every_row_of_the_successor_is_read_exactly_once_after_an_orphan_at_its_next_seq(
    tmp_path: Path,
) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    assert segment_seqs() == [1, 2]  # the orphan sits at the successor's next seq
    seqs = [write(successor, 200 + 10 * i) for i in range(3)]
    assert seqs == [3, 4, 5]
    with reader(tmp_path) as r:
        assert scanned_ids(r) == [0, 1, 2, *range(200, 203), *range(210, 213), *range(220, 223)]
        manifest = r.manifests.read("p-0")
        assert manifest is not None and manifest.seqs() == [1, 3, 4, 5]
        assert manifest.deleted(2)  # void: recorded gone, never published
        ev = evidence(r.segment_location, None, "p-0")
        assert ev.losses() == []
    handle = reader(tmp_path)
    with Subscription(handle, "all", owns_store=True) as sub:
        sub.start("earliest")
        seen = acked_ids(sub)
        assert sorted(seen) == [0, 1, 2, *range(200, 203), *range(210, 213), *range(220, 223)]
        assert len(seen) == len(set(seen))
        assert sub.lost.report()["segments"] == []  # no seq reported lost or dropped
    successor.close()


def test_a_reader_following_the_partition_passes_an_orphan_and_reads_what_comes_after(
    tmp_path: Path,
) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    handle = reader(tmp_path)
    with Subscription(handle, "live", owns_store=True) as sub:
        sub.start("earliest")
        first = sub.poll()
        assert first is not None and [m.seq for m in first.segments] == [1]
        sub.ack(first.end)
        fenced_finalize(zombie)
        assert sub.poll() is None  # the orphan's rows are never read
        write(successor, 300)
        nxt = sub.poll()
        assert nxt is not None and [m.seq for m in nxt.segments] == [3]
        got = [x for m in nxt.segments for b in sub.read(m) for x in b.column("id").to_pylist()]
        assert got == [300, 301, 302]
    successor.close()


def test_a_writer_paused_past_half_its_ttl_checks_its_lease_and_creates_nothing(
    tmp_path: Path,
) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    assert zombie.writer is not None and zombie.writer.lease is not None
    lease = zombie.writer.lease
    lease._renewed_at -= lease.ttl_s  # its clock moved on while it was paused
    zombie.append(id_batch(100, 3))
    zombie.flush()
    with pytest.raises(LeaseLostError):
        zombie.finalize()
    assert segment_seqs() == [1]  # it learnt before creating any object
    with pytest.raises(LeaseLostError):
        zombie.finalize()  # and every later call says so, never anything else
    assert write(successor, 600) == 2
    successor.close()


def test_no_listing_of_a_reader_returns_an_orphan(tmp_path: Path) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    with reader(tmp_path) as r:
        loc = r.segment_location
        assert [m.seq for m in r.segments()] == [1]
        assert loc.published_seqs("p-0") == [1]
        assert [e.seq for e in loc.view("p-0").entries] == [1]
        assert [e.seq for e in loc.listed_view("p-0").entries] == [1]
        assert loc.probe_next({"p-0": 2})["p-0"] == []
        assert scanned_ids(r) == [0, 1, 2]
    successor.close()


def test_a_writer_opening_after_an_orphan_starts_above_it(tmp_path: Path) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    successor.close()  # the successor wrote nothing; a later writer opens the partition
    with QuiverStore.open(ROOT, wal_in(tmp_path / "wal-b"), partition="p-0") as w:
        assert write(w, 400) == 3
    with reader(tmp_path) as r:
        assert scanned_ids(r) == [0, 1, 2, 400, 401, 402]
        assert evidence(r.segment_location, None, "p-0").losses() == []


def test_a_crash_between_a_meta_and_the_manifest_step_is_finished_by_the_next_open(
    tmp_path: Path,
) -> None:
    wal = tmp_path / "wal-a"
    w = QuiverStore.open(ROOT, wal_in(wal), partition="p-0", background=False)
    write(w, 0)
    objs = w.objects
    assert isinstance(objs, MemoryObjects)

    def before(op: str, key: str) -> None:
        if op == "replace" and key == MANIFEST_KEY:
            raise OSError("injected: manifest step lost")

    objs.faults.before = before
    w.append(id_batch(10, 3))
    w.flush()
    with pytest.raises(OSError, match="injected"):
        w.finalize()
    objs.faults.before = None
    assert segment_seqs() == [1, 2]  # the .meta of seq 2 exists, the manifest lacks it
    with reader(tmp_path) as r:
        assert scanned_ids(r) == [0, 1, 2]  # not published yet
    w.close()  # its state was discarded: nothing more is written
    with QuiverStore.open(ROOT, wal_in(wal), partition="p-0", background=False) as again:
        assert again.recovery is not None and again.recovery.republished_seq == 2
        assert write(again, 20) == 3
    with reader(tmp_path) as r:
        assert scanned_ids(r) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
        manifest = r.manifests.read("p-0")
        assert manifest is not None and manifest.seqs() == [1, 2, 3]


def test_gc_full_removes_orphans_and_nothing_published(tmp_path: Path) -> None:
    zombie, successor = taken_over_after_publishing(ROOT, tmp_path)
    fenced_finalize(zombie)
    write(successor, 500)
    successor.close()
    assert segment_seqs() == [1, 2, 3]
    with reader(tmp_path) as r:
        dry = run_gc(r, dry_run=True, full=True)
        assert dry["orphans"] == [{"partition": "p-0", "seq": 2}]
        assert segment_seqs() == [1, 2, 3]
        doc = run_gc(r, dry_run=False, full=True)
        assert doc["orphans"] == [{"partition": "p-0", "seq": 2}]
        assert segment_seqs() == [1, 3]
        assert scanned_ids(r) == [0, 1, 2, 500, 501, 502]
        assert run_gc(r, dry_run=False, full=True)["orphans"] == []
