"""What a new reader sees of a POSIX store through its MANIFESTs (ARCHITECTURE.md §11.1):
exactly the segments published (one published after the manifest's last entry
included), never a deleted one, the listing when the manifest is damaged, and an old
store without manifests upgraded by its first writer open."""

from __future__ import annotations

from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.control.manifest import Manifest, ManifestEntry
from quiver_spark.objects import CountingObjects
from quiver_spark.segment import SegmentLocation
from quiver_spark.subscribers import Outcome
from tests.stores import HAND_SEALED, publish


def _manifest(root: Path, pid: str = "p-0") -> Path:
    return root / "partitions" / pid / "MANIFEST"


def _seen(root: Path, pid: str = "p-0") -> tuple[list[int], bool]:
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        v = s.segment_location.view(pid)
        return [e.seq for e in v.entries], v.from_manifest


def test_a_new_reader_reads_one_manifest_and_misses_no_segment_published_after_it(
    tmp_path: Path,
) -> None:
    with QuiverStore.open(str(tmp_path), HAND_SEALED, partition="p-0", background=False) as w:
        publish(w, 3)
        publication = w.segment_location.publication
        real = publication.manifest_step
        publication.manifest_step = lambda *_args: None  # type: ignore[method-assign]
        publish(w, 1)  # its .meta is durable, its manifest step never ran
        publication.manifest_step = real  # type: ignore[method-assign]
    on_disk = Manifest.decode("m", _manifest(tmp_path).read_bytes())
    assert on_disk.seqs() == [1, 2, 3]
    with QuiverStore.open(str(tmp_path), partition=None, create=False, background=False) as s:
        counting = CountingObjects(s.manifests.objects)
        s.manifests.objects = counting
        view = s.segment_location.view("p-0")
        assert [e.seq for e in view.entries] == [1, 2, 3, 4] and view.from_manifest
        assert dict(counting.counts) == {"get": 1}
    # the next writer open adds it
    QuiverStore.open(str(tmp_path), partition="p-0", background=False).close()
    assert Manifest.decode("m", _manifest(tmp_path).read_bytes()).seqs() == [1, 2, 3, 4]


def test_deleted_segments_never_reappear_to_a_new_reader(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), HAND_SEALED, partition="p-0", background=False) as w:
        w.subscribers.register("r")
        publish(w, 4)
        w.subscribers.record("r", "p-0", [1, 2], Outcome.ACK)
        assert w.run_retention().deleted == {"p-0": [1, 2]}
    assert _seen(tmp_path) == ([3, 4], True)
    m = Manifest.decode("m", _manifest(tmp_path).read_bytes())
    assert m.deleted(1) and m.deleted(2) and m.high == 4


def test_a_damaged_manifest_falls_back_to_the_listing_and_the_next_writer_rewrites_it(
    tmp_path: Path,
) -> None:
    with QuiverStore.open(str(tmp_path), HAND_SEALED, partition="p-0", background=False) as w:
        publish(w, 3)
    raw = bytearray(_manifest(tmp_path).read_bytes())
    raw[-3] ^= 0xFF
    _manifest(tmp_path).write_bytes(bytes(raw))
    with QuiverStore.open(str(tmp_path), partition=None, create=False, background=False) as s:
        view = s.segment_location.view("p-0")
        assert [e.seq for e in view.entries] == [1, 2, 3] and not view.from_manifest
        assert s.manifests.stats.damaged == 1
    QuiverStore.open(str(tmp_path), partition="p-0", background=False).close()
    assert _seen(tmp_path) == ([1, 2, 3], True)


def test_an_old_store_without_manifests_upgrades_on_its_first_writer_open(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), HAND_SEALED, partition="p-0", background=False) as w:
        publish(w, 3)
        w.subscribers.register("r")
        w.subscribers.record("r", "p-0", [1], Outcome.ACK)
        w.run_retention()
    _manifest(tmp_path).unlink()  # as a store written before manifests existed
    QuiverStore.open(str(tmp_path), partition="p-0", background=False).close()
    m = Manifest.decode("m", _manifest(tmp_path).read_bytes())
    assert m.seqs() == [2, 3] and m.deleted(1) and m.high == 3


def test_an_old_store_is_upgraded_by_its_first_reader_too(tmp_path: Path) -> None:
    loc = SegmentLocation(str(tmp_path / "segments"))
    QuiverStore.open(str(tmp_path), partition=None).close()
    import pyarrow as pa

    for seq in (1, 2):
        loc.write("p-0", seq, [pa.record_batch({"id": [seq]})], min_ingestion_ns=seq,
                  max_ingestion_ns=seq, wal_ranges=[(seq, seq)])  # fmt: skip
    assert not _manifest(tmp_path).exists()
    assert _seen(tmp_path) == ([1, 2], True)
    assert Manifest.decode("m", _manifest(tmp_path).read_bytes()).seqs() == [1, 2]


def test_entries_carry_what_status_counts_on_disk(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), HAND_SEALED, partition="p-0", background=False) as w:
        publish(w, 1)
    [e] = Manifest.decode("m", _manifest(tmp_path).read_bytes()).entries
    seg = tmp_path / "segments" / "p-0"
    assert e == ManifestEntry(
        "p-0", 1, (seg / f"{1:020d}.arrow").stat().st_size,
        (seg / f"{1:020d}.meta").stat().st_size, e.rows, e.batches,
        e.min_ingestion_ns, e.max_ingestion_ns,
    )  # fmt: skip
    assert e.rows == 3
