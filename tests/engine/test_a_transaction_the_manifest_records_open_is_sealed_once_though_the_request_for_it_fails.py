"""A transaction the MANIFEST records open (``txns_open``) that the listing of ``txns/``
at the partition's next open missed (a stale listing) is looked at with one GET of its
staged object (ARCHITECTURE.md §10.2, the transaction floor): at the open itself when
the machine came back with its disk (its WAL holds the transaction, which may be
another incarnation's), at the writer's first look at foreign transactions when the
disk was lost. That GET, or the request right after it (the commit record it asks
next), may fail before it happens or succeed with its answer lost: the open then
fails with a Quiver error naming the object, or the look is kept and retried; never
is the transaction retired unseen. With the fault cleared the writer (opened again if
its open failed) converges: every committed row is published exactly once, the
transaction named sealed by the MANIFEST, no staged object left, and a subscriber
registered before reads each row once; also when the transaction's batch is committed
only after the fault (it stays open, never retired, until then)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control import lease as lease_mod
from quiver_spark.control.manifest import Manifest
from quiver_spark.errors import LeaseHeldError, QuiverError
from quiver_spark.objects import memory as memory_mod
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscription import Subscription
from tests.engine.request_faults import RequestFault, names_the_request, request_faults
from tests.lost_machines import APP, ROOT, Clock, lose, machine, observer, staged, task
from tests.stores import scanned_ids, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")

ROWS = [0, 10, 11, 20, 21, 50, 51, 52]


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RequestFault]]:
    yield from request_faults(monkeypatch)


def _manifest() -> Manifest:
    got = MemoryObjects("lost", "s").get("partitions/p-0/MANIFEST")
    assert got is not None
    return Manifest.decode("MANIFEST", got.data)


def _rows(sub: Subscription) -> list[int]:
    seen: list[int] = []
    while (batch := sub.poll()) is not None:
        seen += [x for m in batch.segments for b in sub.read(m) for x in b.column("id").to_pylist()]
        sub.ack(batch.end)
    return seen


def _reboot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot: dict) -> QuiverStore:
    """Machine a opens p-0 again, every listing its open makes answered from
    ``snapshot`` (lagging behind the bucket)."""
    faults = memory_mod.Faults
    with monkeypatch.context() as mp:
        mp.setattr(memory_mod, "Faults", lambda: faults(stale_list=snapshot))
        back = machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    back.objects.faults.stale_list = snapshot  # its first publication's listing lags too
    return back


@pytest.mark.parametrize("position", ["at", "next"])
@pytest.mark.parametrize("kind", ["fail", "lost"])
@pytest.mark.parametrize("disk", ["kept", "lost"])
@pytest.mark.parametrize("decided", ["before-the-loss", "after-the-fault"])
def test_a_failed_look_at_a_transaction_recorded_open_never_retires_it_unseen(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    faults: list[RequestFault],
    decided: str,
    disk: str,
    kind: str,
    position: str,
) -> None:
    lost = machine(tmp_path, "a")
    with Subscription.open(ROOT, "s", config=wal_in(tmp_path / "wal-s")) as sub:
        sub.start("earliest")  # registered before any row: every row is kept for it
    t1 = task(lost, 1, 0, 1)
    assert lost.commit_txn(APP, 1, [("p-0", t1)], rows=1)
    snapshot = MemoryObjects("lost", "s").snapshot()  # before t2 is staged
    t2 = task(lost, 2, 50, 3)  # staged; its batch not committed yet
    t3 = task(lost, 3, 10, 2)
    assert lost.commit_txn(APP, 3, [("p-0", t3)], rows=2)
    assert lost.writer is not None
    lost.writer.maintain()
    lost.finalize()  # t1 and t3 published, t2 recorded open
    assert t2 in _manifest().txns_open
    if decided == "before-the-loss":
        assert lost.commit_txn(APP, 2, [("p-0", t2)], rows=3)  # then the machine is lost
    lose(lost, tmp_path / "wal-a" if disk == "lost" else None)
    with pytest.raises(LeaseHeldError):
        machine(tmp_path, "a", pid=9000, node="node-a-rebooted")
    for seen in lease_mod._seen.values():  # watched for a ttl (instead of waiting)
        seen.first -= lease_mod.DEFAULT_TTL_S + 1

    fault = RequestFault(("get", f"partitions/p-0/txns/{t2:020d}.txn"), kind, position)
    faults.append(fault)
    fault.armed = True
    back: QuiverStore | None = None
    try:
        try:
            back = _reboot(tmp_path, monkeypatch, snapshot)
        except QuiverError as e:  # the open's look failed: nothing half-opened stays
            assert fault.fired is not None and names_the_request(e, fault), (e, fault.fired)
        if back is not None:
            t4 = task(back, 4, 20, 2)
            assert back.commit_txn(APP, 4, [("p-0", t4)], rows=2)
            writer = back.writer
            assert writer is not None
            for step in (writer.maintain, back.finalize):
                try:
                    step()
                except QuiverError as e:  # a tick's failure surfaces, naming the object
                    assert fault.fired is not None and names_the_request(e, fault), e
    finally:
        fault.armed = False
    assert fault.fired is not None, f"never fired: {fault.requests}"
    m = _manifest()
    assert not m.retired(t2) or t2 in m.sealed_txns(), "t2 retired unseen"

    # the fault cleared: the writer (opened again if its open failed) converges
    if back is None:
        back = _reboot(tmp_path, monkeypatch, snapshot)
        t4 = task(back, 4, 20, 2)
        assert back.commit_txn(APP, 4, [("p-0", t4)], rows=2)
    if decided == "after-the-fault":  # the driver commits t2's batch only now
        assert back.commit_txn(APP, 2, [("p-0", t2)], rows=3)
    assert back.writer is not None
    back.writer.maintain()
    back.finalize()
    back.objects.faults.stale_list = None
    back.close()

    obs = observer(tmp_path, Clock())
    obs.finalize_idle_partitions()
    assert scanned_ids(obs) == ROWS
    assert t2 in _manifest().sealed_txns()  # sealed once, never again
    assert staged() == []
    with Subscription.open(ROOT, "s", config=wal_in(tmp_path / "wal-s")) as sub:
        assert sorted(_rows(sub)) == ROWS
    obs.close()
