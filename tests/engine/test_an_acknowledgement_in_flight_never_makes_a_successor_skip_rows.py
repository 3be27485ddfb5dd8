"""An acknowledgement a paused live consumer sent before its subscriber was taken over
never makes the successor skip, or the store reclaim, a segment the successor has not
delivered (ARCHITECTURE.md §18, §8.2, §13.7), with real processes on an S3 root.

Consumer C1 of subscriber ``s`` reads segments 1..3 and acknowledges them, then reads
4..6; its acknowledgement of 4..6 (the ack-log delta ``PUT``) and everything after it
is held at its fault proxy (a long GC pause, a network partition). Consumer C2, in
another process, takes the subscriber over once C1's live lease has gone unrenewed for
its ttl. C1's held requests then land: before C2 plans, after C2 planned but before it
read, or after C2 delivered and acknowledged. The writer publishes more and C2 reads
on. Every row is delivered exactly once across what C1 was told it acknowledged and
what C2 delivered; no segment is deleted that neither did; C1's late acknowledgement
is refused with ``LeaseLostError`` or is harmless by that count, and C1 acknowledges
nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from tests.driven import ChildRaised, Driven
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import TAKE_OVER_WITHIN_S, consumer, options_through, processes
from tests.stores import wal_in

__all__ = ["fault_proxies", "moto_s3", "processes"]

ROWS = 3
"""Rows per segment: segment ``k`` holds ids ``3(k-1) .. 3k-1``."""

MOMENTS = [
    "before the successor plans",
    "after the successor planned, before it read",
    "after the successor delivered and acknowledged",
]


def segment_ids(seqs: range) -> list[int]:
    return [i for k in seqs for i in range((k - 1) * ROWS, k * ROWS)]


def seqs_of(ids: list[int]) -> set[int]:
    return {i // ROWS + 1 for i in ids}


def publish(store: QuiverStore, seqs: range) -> None:
    for k in seqs:
        store.append(pa.record_batch({"id": pa.array(segment_ids(range(k, k + 1)), pa.int64())}))
        meta = store.finalize()
        assert meta is not None and meta.seq == k


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_paused_consumers_acknowledgement_landing_late_never_makes_its_successor_skip_rows(
    moment: str,
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
    processes: Callable[[str], Driven],
) -> None:
    root = f"{moto_s3.url}/{unique_prefix('late-ack')}"
    pw, pc1, pc2 = fault_proxies(), fault_proxies(), fault_proxies()
    c1, c2 = processes("consumer C1"), processes("consumer C2")
    with QuiverStore.open(
        root,
        wal_in(tmp_path / "wal-w"),
        partition="p-0",
        background=False,
        storage_options=options_through(pw),
    ) as w:
        publish(w, range(1, 7))
        consumer(c1, root, pc1, tmp_path / "wal-c1")
        assert c1.run("plan(3)") == [1, 2, 3]
        c1_acked = c1.run("read()")
        assert c1.run("ack()") == 3
        assert c1.run("plan(3)") == [4, 5, 6]
        in_flight = c1.run("read()")
        assert in_flight == segment_ids(range(4, 7))

        rule = pc1.add_rule(
            method="PUT", path=r"/subscribers/log/\d{20}\.ack$", action="hold", hold_later=True
        )
        acking = c1.start("ack()")
        rule.wait_hit(30)
        assert not acking.done(0.2), pc1.describe()

        consumer(c2, root, pc2, tmp_path / "wal-c2", within=TAKE_OVER_WITHIN_S)
        c2_read: list[int] = []
        if moment == MOMENTS[0]:
            pc1.release()
            late = acking.outcome(30)
        elif moment == MOMENTS[1]:
            planned = c2.run("plan()")
            assert planned is not None, "C2 planned nothing after C1's last acknowledged 3"
            pc1.release()
            late = acking.outcome(30)
            c2_read += c2.run("read()")
            c2.run("ack()")
        else:
            delivered = c2.run("deliver()")
            assert delivered is not None, "C2 planned nothing after C1's last acknowledged 3"
            c2_read += delivered
            pc1.release()
            late = acking.outcome(30)
        if isinstance(late, ChildRaised):
            assert late.is_a("LeaseLostError"), f"C1's late acknowledgement: {late}"
        else:
            c1_acked += in_flight  # C1 was told its acknowledgement is durable
        more = c1.start("deliver(3)").outcome(30)  # C1 goes on as if nothing happened
        if isinstance(more, list):
            c1_acked += more
        elif more is not None:
            assert isinstance(more, ChildRaised) and more.is_a("LeaseLostError"), more

        publish(w, range(7, 9))
    c2_read += c2.run("drain()")
    mark = c2.run("sub.registry.refresh() or sub.registry.hwm(sub.name, 'p-0')")
    c2.run("sub.close()")

    everything = segment_ids(range(1, 9))
    log = f"C1's requests:\n{pc1.describe()}\nC2's requests:\n{pc2.describe()}"
    both = sorted(c1_acked + c2_read)
    assert both == everything, (
        f"released {moment}: C1 was told it acknowledged segments {sorted(seqs_of(c1_acked))} "
        f"(its late acknowledgement: {late!r}; then: {more!r}), C2 delivered "
        f"{sorted(seqs_of(c2_read))}: missing {sorted(set(everything) - set(both))}, "
        f"twice {sorted({i for i in both if both.count(i) > 1})}\n{log}"
    )
    assert mark == 8, f"C2's acknowledged mark {mark}\n{log}"
    reclaimed = sorted(
        {
            int(m.group(1))
            for proxy in (pw, pc1, pc2)
            for key in proxy.deleted()
            if (m := re.search(r"/segments/p-0/(\d{20})\.arrow$", key))
        }
    )
    delivered_seqs = seqs_of(c1_acked) | seqs_of(c2_read)
    assert set(reclaimed) <= delivered_seqs, (
        f"segments {sorted(set(reclaimed) - delivered_seqs)} deleted though neither C1 was "
        f"told it acknowledged them nor C2 delivered them\n{log}"
    )
