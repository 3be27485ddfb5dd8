"""A retention pass on an object root records its deletions in the ack log, takes the
segments out of their partition's MANIFEST, then removes their objects (ARCHITECTURE.md
§15.1, §11.3). A pass that stops after that MANIFEST step (its process dies, or the
answer of the MANIFEST replace is lost and the pass fails) leaves objects of segments
that are recorded deleted and no longer published. Another long-lived handle finishes
a deletion it held in its index at its next pass; one it never held (it learned the
partition's new segments from a MANIFEST read after that step, where they are no
longer listed) is finished by its next listing survey, at most ``RESURVEY_PERIOD_S``
later, or by the stopped handle's own next pass (a pass that failed surveys). Nothing
is read twice or lost meanwhile."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, retained
from quiver_spark.errors import QuiverError
from quiver_spark.subscription import Subscription
from tests.engine.request_faults import RequestFault, request_faults
from tests.engine.test_a_retention_pass_that_loses_a_request_deletes_nothing_still_needed import (
    _ack_all,
    _seal,
    _segments,
)
from tests.stores import wal_in

_BUCKETS = itertools.count()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RequestFault]]:
    yield from request_faults(monkeypatch)


@pytest.mark.parametrize("finisher", ["another handle's listing survey", "its own next pass"])
@pytest.mark.parametrize("kind", ["fail", "lost"])
def test_objects_a_stopped_pass_left_after_its_manifest_step_go_within_the_resurvey_period(
    tmp_path: Path,
    faults: list[RequestFault],
    kind: str,
    finisher: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"memory://left-deletion-{next(_BUCKETS)}/s"
    config = wal_in(tmp_path / "wal")
    # the request after the MANIFEST replace (the first unlink) fails, or the replace's
    # answer is lost: either way the MANIFEST step happened and no object went
    target = ("replace", "partitions/w-1/MANIFEST")
    fault = RequestFault(target, kind, "next" if kind == "fail" else "at")
    faults.append(fault)
    with (
        QuiverStore.open(url, config, partition="w-1", background=False) as w1,
        Subscription.open(url, "a", config=config) as a,
        QuiverStore.open(url, config, partition="w-0", background=False) as w,
    ):
        w1._retention_after_write = lambda: None
        a._retention_after_ack = lambda: 0  # type: ignore[method-assign]
        a.start("earliest")
        _seal(w1, 100)
        w.run_retention()  # w's index: w-1/1
        _seal(w1, 200)  # w-1/2: w has not looked since
        assert sorted(_ack_all(a)) == [100, 101, 102, 200, 201, 202]
        fault.armed = True
        with pytest.raises(QuiverError):
            a.store.run_retention()  # records w-1/1..2 deleted, unlists them, stops
        fault.armed = False
        assert fault.fired is not None
        assert _segments(url) == {("w-1", 1), ("w-1", 2)}  # a's process is gone now
        if finisher == "its own next pass":
            a.store.run_retention()  # a pass that failed surveys
            assert _segments(url) == set()
            return
        w.run_retention()  # the seq its index held: finished at once
        assert ("w-1", 1) not in _segments(url)
        # the listing survey, due RESURVEY_PERIOD_S after the last one, finds the rest
        monkeypatch.setattr(retained, "RESURVEY_PERIOD_S", 0.0)
        w.run_retention()
        assert _segments(url) == set()
