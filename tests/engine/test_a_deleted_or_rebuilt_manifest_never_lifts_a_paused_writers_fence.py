"""A MANIFEST that is missing, or that another process rewrote from a listing after
damage, must not lift its partition's fence (ARCHITECTURE.md §11.1, §11.3, §16.2): a
writer whose lease moved while it was paused is refused when it resumes, whoever
wrote the MANIFEST meanwhile. §11.1 says a missing MANIFEST is written again from a
listing by the next reader or writer, and a damaged one by the next writer or
retention pass; written at an epoch below the successor's, it lets the paused
writer publish its open segment, whose committed rows the successor already sealed
from their staged object: the rows are then read twice.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, RetentionConfig
from quiver_spark.errors import LeaseHeldError, LeaseLostError
from quiver_spark.layout import manifest as manifest_key
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, ROOT, lose, machine, observer, task
from tests.stores import id_batch, scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _bucket() -> MemoryObjects:
    return MemoryObjects("lost", "s")


def _paused_writer_and_its_successor(tmp_path: Path) -> tuple[QuiverStore, QuiverStore]:
    """Machine a commits rows 0..2 (staged) into its open segment and is paused past
    its lease; machine b takes the slot over and seals the staged transaction."""
    zombie = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None
    zombie.writer.maintain()
    lose(zombie, None, process_dies=False)
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    time.sleep(0.4)
    successor = machine(tmp_path, "b")
    assert successor.writer is not None
    successor.writer.maintain()
    assert scanned_ids(successor) == [0, 1, 2]
    return zombie, successor


def _resume(zombie: QuiverStore) -> None:
    """The paused writer resumes just past its own lease check and seals its segment."""
    assert zombie.writer is not None
    zombie.writer.sealing.check_lease = lambda: None
    with contextlib.suppress(LeaseLostError):
        zombie.finalize()


def test_a_paused_writer_that_finds_the_manifest_deleted_is_refused_and_reads_nothing_twice(
    tmp_path: Path,
) -> None:
    zombie, successor = _paused_writer_and_its_successor(tmp_path)
    _bucket().delete(manifest_key("p-0"))
    _resume(zombie)
    assert scanned_ids(successor) == [0, 1, 2]


def test_a_manifest_a_reader_wrote_again_after_it_went_missing_still_fences_a_paused_writer(
    tmp_path: Path,
) -> None:
    zombie, successor = _paused_writer_and_its_successor(tmp_path)
    _bucket().delete(manifest_key("p-0"))
    reader = observer(tmp_path)
    assert scanned_ids(reader) == [0, 1, 2]  # a new reader writes it again from a listing
    _resume(zombie)
    assert scanned_ids(successor) == [0, 1, 2]


def test_a_damaged_manifest_another_processs_retention_rewrote_still_fences_a_paused_writer(
    tmp_path: Path,
) -> None:
    zombie = machine(
        tmp_path, "a", lease_ttl_s=0.3, retention=RetentionConfig(max_age_hours=1)
    )  # the store's recorded policy
    zombie.append(id_batch(100, 3))  # an older segment, which time retention removes
    assert zombie.finalize() is not None
    time.sleep(0.05)
    between_ns = time.time_ns()
    time.sleep(0.05)
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None and zombie.writer.lease is not None
    zombie.writer.maintain()
    lose(zombie, None, process_dies=False)
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    time.sleep(0.4)
    successor = machine(tmp_path, "b")
    assert successor.writer is not None and successor.writer.lease is not None
    successor.writer.maintain()
    assert scanned_ids(successor) == [0, 1, 2, 100, 101, 102]
    new_epoch = successor.writer.lease.epoch
    key = manifest_key("p-0")
    got = _bucket().get(key)
    assert got is not None
    _bucket().replace(key, got.data[:-4] + b"\x00\x01\x02\x03", version=got.version)
    # another process's retention pass (a quiver gc, another partition's writer)
    with QuiverStore.open(
        ROOT,
        wal_in(tmp_path / "wal-gc"),
        partition=None,
        background=False,
    ) as gc:
        gc.run_retention(now_ns=between_ns + 3600 * 10**9)
    assert scanned_ids(successor) == [0, 1, 2]
    _resume(zombie)
    assert scanned_ids(successor) == [0, 1, 2]
    rebuilt = successor.manifests.read("p-0")
    assert rebuilt is not None
    assert rebuilt.epoch >= new_epoch, (
        f"the MANIFEST carries epoch {rebuilt.epoch}, below its writer's {new_epoch}"
    )
