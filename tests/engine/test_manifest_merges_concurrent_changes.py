"""A partition's MANIFEST (ARCHITECTURE.md §11.1) on any object store: a writer's
publication and a retention pass of another handle both land whatever their order
(no lost entry, no resurrected deletion), a deleted seq never comes back, a higher
epoch fences a writer, and a damaged body is refused as damage."""

from __future__ import annotations

import pytest

from quiver_spark.control import cas
from quiver_spark.control.manifest import Manifest, ManifestEntry
from quiver_spark.control.manifest_store import ManifestStore
from quiver_spark.errors import CorruptionError, FencedError, LostRaceError
from quiver_spark.format import encode_frame
from quiver_spark.layout import manifest as manifest_key
from quiver_spark.objects.memory import MemoryObjects

pytestmark = pytest.mark.usefixtures("fresh_memory")


def entry(seq: int) -> ManifestEntry:
    return ManifestEntry("p-0", seq, 100 + seq, 50, 10, 1, seq, seq)


def nothing(p: str) -> Manifest:
    return Manifest(p)


def publish(store: ManifestStore, *seqs: int) -> Manifest:
    return store.update(
        "p-0", lambda m: m.published(entry(s) for s in seqs), build=lambda: nothing("p-0")
    )


def remove(store: ManifestStore, *seqs: int) -> Manifest:
    return store.update("p-0", lambda m: m.removed(seqs), build=lambda: nothing("p-0"))


def test_a_publication_and_a_removal_by_another_handle_both_land_in_either_order() -> None:
    writer = ManifestStore(MemoryObjects("b"))
    retention = ManifestStore(MemoryObjects("b"))
    publish(writer, 1, 2, 3)
    remove(retention, 1)  # the writer's remembered version is stale now
    publish(writer, 4)  # mismatch: read again, applied again
    remove(retention, 2)  # and the other way round
    got = ManifestStore(MemoryObjects("b")).read("p-0")
    assert got is not None
    assert got.seqs() == [3, 4] and got.high == 4
    assert got.deleted(1) and got.deleted(2) and not got.deleted(3)
    assert got.deleted_floor == 2 and not got.deleted_above


def test_a_deleted_seq_is_never_published_again() -> None:
    store = ManifestStore(MemoryObjects("b"))
    publish(store, 1, 2, 3)
    remove(store, 2)
    after = publish(store, 2)  # a stale re-application, or a listing that saw it
    assert after.seqs() == [1, 3] and after.deleted(2)


def test_the_writer_s_next_publication_costs_one_request_while_nobody_else_wrote() -> None:
    from quiver_spark.objects import CountingObjects

    counting = CountingObjects(MemoryObjects("b"))
    store = ManifestStore(counting)
    publish(store, 1)
    counting.counts.clear()
    publish(store, 2)
    assert dict(counting.counts) == {"replace": 1}


def test_a_manifest_written_at_a_higher_epoch_fences_the_writer() -> None:
    new = ManifestStore(MemoryObjects("b"), epoch=2)
    old = ManifestStore(MemoryObjects("b"), epoch=1)
    publish(old, 1)
    publish(new, 2)
    with pytest.raises(FencedError, match="had epoch 1, the manifest was written at epoch 2"):
        publish(old, 3)
    got = new.read("p-0")
    assert got is not None and got.seqs() == [1, 2] and got.epoch == 2


def test_a_damaged_manifest_is_rebuilt_by_the_next_change() -> None:
    objects = MemoryObjects("b")
    store = ManifestStore(objects)
    publish(store, 1)
    objects.put(manifest_key("p-0"), b"QMAN" + b"\x00" * 40)
    with pytest.raises(CorruptionError):
        ManifestStore(objects).read("p-0")
    again = ManifestStore(objects)
    again.update(
        "p-0",
        lambda m: m.published([entry(2)]),
        build=lambda: Manifest("p-0").published([entry(1)]),
    )
    got = ManifestStore(objects).read("p-0")
    assert got is not None and got.seqs() == [1, 2]


def test_a_body_whose_columns_are_not_integers_is_damage() -> None:
    good = Manifest("p-0").published([entry(1)])
    assert Manifest.decode("m", good.encode()).seqs() == [1]
    body = {
        "partition": "p-0", "epoch": 0, "high": 1, "deleted_floor": 0, "deleted_above": [],
        "segments": {c: ["x"] for c in ("seq", "size_bytes", "meta_bytes", "rows", "batches",
                                          "min_ingestion_ns", "max_ingestion_ns")},
    }  # fmt: skip
    with pytest.raises(CorruptionError, match="not an integer"):
        Manifest.decode("m", encode_frame(b"QMAN", body))


def test_a_first_manifest_is_created_only_once_when_two_handles_race() -> None:
    a = ManifestStore(MemoryObjects("b"))
    b = ManifestStore(MemoryObjects("b"))
    assert a.create(Manifest("p-0").published([entry(1)])) is not None
    assert b.create(Manifest("p-0").published([entry(7)])) is None
    got = b.read("p-0")
    assert got is not None and got.seqs() == [1]


def test_a_manifest_changed_before_every_write_gives_up_with_a_lost_race_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cas, "pause", lambda n, sleep: None)
    writer = ManifestStore(MemoryObjects("b"))
    other = ManifestStore(MemoryObjects("b"))
    publish(writer, 1)
    seqs = iter(range(2, 1000))

    def meddle(m: Manifest) -> Manifest:
        publish(other, next(seqs))  # another handle lands between every read and write
        return m.published([entry(500)])

    with pytest.raises(LostRaceError) as caught:
        writer.update("p-0", meddle, build=lambda: nothing("p-0"))
    assert caught.value.attempts == cas.ATTEMPTS
    assert caught.value.where == writer.display("p-0")
    assert f"{cas.ATTEMPTS} conditional writes in a row lost" in str(caught.value)
    got = ManifestStore(MemoryObjects("b")).read("p-0")
    assert got is not None and 500 not in got.seqs()  # nothing of the lost attempts
