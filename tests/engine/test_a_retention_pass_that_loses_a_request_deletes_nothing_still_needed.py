"""A long-lived retention pass on an object root learns what other writers published
from one listing of the publication hints (``segments/~hints/``) and one GET of the
MANIFEST of each partition that announced something new, taking the new segments from
its entries instead of their ``.meta`` (ARCHITECTURE.md §12, §15.1); a deletion reads
the MANIFEST again before its MANIFEST step. Any of these requests, or the one right
after it, may fail before it happens (a 503), succeed with its answer lost, or (a
listing) answer from a bucket that lags, in a writer's pass or in the pass a
subscriber's acknowledgement runs: the pass then deletes nothing a subscriber still
needs, a writer's names what failed with a Quiver error, an acknowledgement stays
durable and raises nothing, and no half-state is left: with the fault cleared the
next pass of the handle that ran it, then the other handle's, delete exactly what
every subscriber acknowledged, each index is what a new process's survey reads, a live
writer's later segments are learned, and every row written is read once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.errors import QuiverError
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.retained import RetainedIndex
from quiver_spark.subscription import Batch, Subscription
from tests.engine.request_faults import RequestFault, names_the_request, request_faults
from tests.stores import wal_in

_BUCKETS = itertools.count()

HINTS = ("list", "segments/~hints/")
W1_MANIFEST = ("get", "partitions/w-1/MANIFEST")


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RequestFault]]:
    yield from request_faults(monkeypatch)


def _seal(w: QuiverStore, lo: int) -> None:
    w.append(pa.record_batch({"id": pa.array(range(lo, lo + 3), pa.int64())}))
    w.flush()
    w.finalize()


def _rows(sub: Subscription, batch: Batch) -> list[int]:
    return [x for m in batch.segments for b in sub.read(m) for x in b.column("id").to_pylist()]


def _ack_all(sub: Subscription) -> list[int]:
    seen: list[int] = []
    while (batch := sub.poll()) is not None:
        seen += _rows(sub, batch)
        sub.ack(batch.end)
    return seen


def _bucket(url: str) -> MemoryObjects:
    bucket, prefix = url.removeprefix("memory://").split("/", 1)
    return MemoryObjects(bucket, prefix)


def _segments(url: str) -> set[tuple[str, int]]:
    """The (partition, seq) whose ``.arrow`` and ``.meta`` are both in the bucket."""
    keys = {o.key for o in _bucket(url).list("segments/")}
    out = set()
    for k in keys:
        if k.endswith(".meta") and k.removesuffix(".meta") + ".arrow" in keys:
            pid, name = k.removeprefix("segments/").split("/")
            out.add((pid, int(name.removesuffix(".meta"))))
    return out


def _facts(index: RetainedIndex) -> dict[str, list[tuple[int, int, int, int, int]]]:
    return {
        p: [(s.seq, s.size_bytes, s.rows, s.min_ingestion_ns, s.max_ingestion_ns) for s in segs]
        for p, segs in index.listing().items()
        if segs
    }


def _surveyed(url: str, config: StoreConfig) -> RetainedIndex:
    """What a new process's first pass reads: every partition's MANIFEST."""
    with QuiverStore.open(url, config, partition=None, background=False) as fresh:
        index = RetainedIndex()
        index.sync(fresh.segment_location, None, full=True)
        return index


TARGETS = {
    "hints-listing": (HINTS, 1),
    "manifest-get": (W1_MANIFEST, 1),  # the index's read of what w-1 announced
    "removal-manifest-get": (W1_MANIFEST, 2),  # before the deletion's MANIFEST step
}
CASES = [
    pytest.param(runner, name, kind, position, id=f"{runner}-{name}-{kind}-{position}")
    for runner in ("writer", "ack")
    for name in TARGETS
    for kind in ("fail", "lost")
    for position in ("at", "next")
] + [
    pytest.param(runner, "hints-listing", "stale", "at", id=f"{runner}-hints-listing-stale-at")
    for runner in ("writer", "ack")
]
"""Who runs the pass: the writer of w-0 (its maintenance, which raises a failed pass),
or subscriber a's acknowledgement (its pass after the ack is durable, which never
raises); at which request, which fault, at it or at the request after it."""


@pytest.mark.parametrize(("runner", "request_", "kind", "position"), CASES)
def test_a_pass_that_loses_a_request_deletes_nothing_still_needed_and_the_next_converges(
    tmp_path: Path,
    faults: list[RequestFault],
    runner: str,
    request_: str,
    kind: str,
    position: str,
) -> None:
    url = f"memory://lossy-pass-{next(_BUCKETS)}/s"
    config = wal_in(tmp_path / "wal")
    target, nth = TARGETS[request_]
    fault = RequestFault(target, kind, position, nth)
    faults.append(fault)
    with (
        QuiverStore.open(url, config, partition="w-1", background=False) as w1,
        Subscription.open(url, "a", config=config) as a,
        Subscription.open(url, "b", config=config) as b,
        QuiverStore.open(url, config, partition="w-0", background=False) as w,
    ):
        w1._retention_after_write = lambda: None
        for sub in (a, b):  # only the test runs passes
            sub._retention_after_ack = lambda: 0  # type: ignore[method-assign]
            sub.start("earliest")
        _seal(w1, 100)
        _seal(w, 0)
        w.run_retention()  # the first passes survey
        a.store.run_retention()
        fault.snapshot = _bucket(url).snapshot()  # before w-1's segments 2 to 4, and w-2
        _seal(w1, 200)
        with QuiverStore.open(url, config, partition="w-2", background=False) as w2:
            w2._retention_after_write = lambda: None
            _seal(w2, 600)  # a partition the passes never saw
        read_b = _ack_all(b)  # b acknowledged w-0/1, w-1/1..2 and w-2/1
        read_a = _ack_all(a)  # and a
        _seal(w1, 300)
        batch = a.poll()  # a reads w-1/3 and acknowledges it below
        assert batch is not None
        read_a += _rows(a, batch)
        _seal(w1, 400)  # announced above what a's MANIFEST copy holds
        assert sorted(read_b) == [0, 1, 2, 100, 101, 102, 200, 201, 202, 600, 601, 602]
        assert sorted(read_a) == sorted([*read_b, 300, 301, 302])
        needed = {("w-1", 3), ("w-1", 4)}
        before = _segments(url)
        assert before == {("w-0", 1), ("w-1", 1), ("w-1", 2), ("w-2", 1), *needed}

        result = None
        if runner == "writer":
            a.ack(batch.end)
        else:
            del a._retention_after_ack  # its ack runs its pass
        fault.armed = True
        try:
            if runner == "writer":
                result = w.run_retention()
            else:
                a.ack(batch.end)  # durable first: its pass's failure is never raised
        except QuiverError as e:
            assert runner == "writer", f"an acknowledgement raised its pass's failure: {e!r}"
            assert fault.fired is not None and names_the_request(e, fault), (e, fault.fired)
        finally:
            fault.armed = False
        a._retention_after_ack = lambda: 0  # type: ignore[method-assign]
        assert fault.fired is not None, f"never fired at {request_}: {fault.requests}"
        assert fault.fired == target or position == "next"
        after = a.poll()  # the acknowledgement is durable: a goes on from its end
        assert after is not None and after.start == batch.end
        left = _segments(url)
        assert needed <= left, f"deleted what b still needs: {before - left}"
        if result is not None:
            assert set(result.deleted.get("w-1", [])) <= {1, 2}
            assert set(result.deleted.get("w-0", [])) <= {1}
            assert set(result.deleted.get("w-2", [])) <= {1}

        # the fault cleared: the next pass of the handle that ran it gets everything
        # right, and so does the other's
        passes = (w, a.store) if runner == "writer" else (a.store, w)
        for store in passes:
            store.run_retention()
            assert _segments(url) == needed
        _seal(w1, 500)  # the live writer goes on
        for store in passes:
            store.run_retention()
            assert _segments(url) == {*needed, ("w-1", 5)}
            assert _facts(store._retention.index) == _facts(_surveyed(url, config))
        # every row written is read once: b reads what it had not, a the rest
        assert sorted(read_b + _ack_all(b)) == sorted([*read_a, 400, 401, 402, 500, 501, 502])
        assert _ack_all(a) == [400, 401, 402, 500, 501, 502]
        for store in passes:
            store.run_retention()
            assert _segments(url) == set()
            assert _facts(store._retention.index) == _facts(_surveyed(url, config)) == {}
