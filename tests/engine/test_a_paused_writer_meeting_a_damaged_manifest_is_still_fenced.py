"""A MANIFEST that fails verification must not lift the fence of its partition
(ARCHITECTURE.md §11.3, §16.2): a writer whose lease moved while it was paused, and
that resumes to find the MANIFEST damaged, is refused like any other fenced holder.
Rebuilding the MANIFEST from a listing at the paused writer's own, older epoch would
publish its segment after its successor took over (its committed rows, which the
successor already sealed from their staged object, then read twice) and would lower
the epoch every later holder is fenced by.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control.manifest import Manifest
from quiver_spark.errors import CorruptionError, LeaseHeldError, LeaseLostError
from quiver_spark.layout import manifest as manifest_key
from quiver_spark.objects.memory import MemoryObjects
from tests.lost_machines import APP, lose, machine, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


def _bucket() -> MemoryObjects:
    return MemoryObjects("lost", "s")


def _successor(tmp_path: Path) -> QuiverStore:
    """Another machine of the slot takes the lease over: seen unrenewed for its ttl."""
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "b")
    time.sleep(0.4)
    return machine(tmp_path, "b")


def _damage_manifest() -> None:
    """The partition's MANIFEST no longer verifies (its last bytes overwritten)."""
    key = manifest_key("p-0")
    got = _bucket().get(key)
    assert got is not None
    _bucket().replace(key, got.data[:-4] + b"\x00\x01\x02\x03", version=got.version)


def test_a_paused_writer_that_finds_the_manifest_damaged_is_refused_and_reads_nothing_twice(
    tmp_path: Path,
) -> None:
    zombie = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None
    zombie.writer.maintain()  # its committed rows wait in its open segment
    lose(zombie, None, process_dies=False)  # paused: its lease is no longer renewed
    successor = _successor(tmp_path)
    assert successor.writer is not None
    successor.writer.maintain()  # seals the paused writer's staged transaction
    assert scanned_ids(successor) == [0, 1, 2]
    _damage_manifest()
    # the paused writer resumes just past its own lease check and seals its open segment
    zombie.writer.sealing.check_lease = lambda: None
    with contextlib.suppress(LeaseLostError):
        zombie.finalize()
    assert scanned_ids(successor) == [0, 1, 2]  # once: the paused writer published nothing


def test_a_paused_writer_never_writes_its_older_epoch_over_a_damaged_manifest(
    tmp_path: Path,
) -> None:
    zombie = machine(tmp_path, "a", lease_ttl_s=0.3)
    t1 = task(zombie, 1, 0, 3)
    assert zombie.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    assert zombie.writer is not None and zombie.writer.lease is not None
    zombie.writer.maintain()
    old_epoch = zombie.writer.lease.epoch
    lose(zombie, None, process_dies=False)
    successor = _successor(tmp_path)
    assert successor.writer is not None and successor.writer.lease is not None
    new_epoch = successor.writer.lease.epoch
    assert new_epoch > old_epoch
    _damage_manifest()
    zombie.writer.sealing.check_lease = lambda: None
    with contextlib.suppress(LeaseLostError):
        zombie.finalize()
    m = successor.manifests.read("p-0") if _manifest_readable() else None
    assert m is None or m.epoch >= new_epoch, (
        f"the MANIFEST now carries epoch {m.epoch}, below its successor's {new_epoch}"
    )


def _manifest_readable() -> bool:
    got = _bucket().get(manifest_key("p-0"))
    if got is None:
        return False
    try:
        Manifest.decode("MANIFEST", got.data)
    except CorruptionError:
        return False
    return True
