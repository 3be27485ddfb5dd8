"""A machine that returns with its disk never seals again a transaction an observer
sealed for it and retention deleted, even when the partition's GONE does not record
the transaction (the pass that retired it could not write GONE, or died before it
did) and the MANIFEST was damaged afterwards.

The transactions retired with their segments (``txns_gone``) are kept twice on an
object root, in the MANIFEST and in ``partitions/<pid>/GONE``, so that a MANIFEST
rewritten from a listing still names them (ARCHITECTURE.md §15.4, §10.2). The GONE
write is best effort: a failure is logged and the pass goes on deleting the segment,
"the ack log's deleted marks cover the seqs meanwhile"; nothing covers the
transaction, though: the ack log knows seqs, not transactions. When the MANIFEST is
damaged before the next removal of a segment of that partition writes GONE again,
the returning machine's open rewrites it from a listing joined with a GONE that
never learned the transaction, and its WAL's copy is taken for one nobody sealed:
rows a subscriber read and acknowledged are published again. A pass that dies
between its MANIFEST change and its GONE write leaves the same hole with no storage
failure at all: the pass that finishes the deletion (``quiver gc --full``) changes
no MANIFEST, so it writes no GONE.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import Outcome
from tests.lost_machines import APP, Clock, lose, machine, observer, seal_after_expiry, task
from tests.stores import scanned_ids

pytestmark = pytest.mark.usefixtures("fresh_memory")


class Crash(BaseException):
    """The process dies here."""


def sealed_for_a_lost_machine_and_read(tmp_path: Path) -> tuple[QuiverStore, int]:
    """Machine a is lost with its WAL intact after its task staged and the driver
    committed a transaction; the observer seals it and a subscriber reads and
    acknowledges its segment. Returns the observer and the segment's seq."""
    lost = machine(tmp_path, "a")
    t1 = task(lost, 1, 0, 3)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=3)
    lose(lost, None)  # unreachable, its disk kept

    clock = Clock()
    obs = observer(tmp_path, clock)
    obs.subscribers.register("s")
    assert len(seal_after_expiry(obs, clock)) == 1
    assert scanned_ids(obs) == [0, 1, 2]
    [seq] = [m.seq for m in obs.segments("p-0")]
    obs.subscribers.record("s", "p-0", [seq], Outcome.ACK)  # read and acknowledged
    return obs, seq


def gone_writes_fail(fail: Callable[[str], BaseException]) -> Callable[[str, str], None]:
    failed: list[str] = []

    def before(op: str, key: str) -> None:
        if op in ("create", "replace", "put") and key.endswith("/GONE") and not failed:
            failed.append(key)
            raise fail(key)

    return before


def damaged_manifest_then_machine_a_returns(tmp_path: Path, obs: QuiverStore) -> None:
    objects = MemoryObjects("lost", "s")
    assert [o.key for o in objects.list("partitions/p-0/txns/")] == []
    assert [o.key for o in objects.list("segments/p-0/")] == []
    manifest = objects.get("partitions/p-0/MANIFEST")
    assert manifest is not None
    damaged = bytearray(manifest.data)
    damaged[len(damaged) // 2] ^= 0xFF
    objects.put("partitions/p-0/MANIFEST", bytes(damaged))

    back = machine(tmp_path, "a")  # its WAL still holds t1; its open rewrites the MANIFEST
    assert back.writer is not None
    back.writer.maintain()
    back.finalize()
    back.close()
    assert scanned_ids(obs) == [], "rows read and retired came back"


def test_one_refused_gone_write_never_lets_a_returning_machine_seal_a_retired_transaction(
    tmp_path: Path,
) -> None:
    obs, seq = sealed_for_a_lost_machine_and_read(tmp_path)
    obs.objects.faults.before = gone_writes_fail(lambda key: ConnectionError(f"503: {key}"))
    first = obs.run_retention()  # deletes them, or holds them until GONE can say so
    assert first.deleted in ({"p-0": [seq]}, {})
    if not first.deleted:
        assert first.plan.held == [("p-0", q) for q in [seq]]
    obs.objects.faults.before = None
    obs.run_retention()  # what was held goes now

    damaged_manifest_then_machine_a_returns(tmp_path, obs)
    obs.close()


def test_a_pass_that_died_before_its_gone_write_never_lets_a_machine_seal_a_retired_one(
    tmp_path: Path,
) -> None:
    obs, _ = sealed_for_a_lost_machine_and_read(tmp_path)
    obs.objects.faults.before = gone_writes_fail(Crash)
    with pytest.raises(Crash):
        obs.run_retention()  # the MANIFEST records the segment and t1 gone, GONE does not
    obs.objects.faults.before = None

    # a new process finishes the deletion (`quiver gc --full`)
    gc = QuiverStore.open("memory://lost/s", None, partition=None, background=False)
    gc.run_retention(listing=True)
    gc.close()

    damaged_manifest_then_machine_a_returns(tmp_path, obs)
    obs.close()
