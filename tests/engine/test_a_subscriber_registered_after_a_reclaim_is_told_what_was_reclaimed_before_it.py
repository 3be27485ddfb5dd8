"""A subscriber registered after retention reclaimed segments starts with one WARNING
line (``quiver.subscriber.registered_late``) saying how many segments were reclaimed
before it existed, their rows and the range of their ingestion times, and where it
starts: retention deletes a segment once every registered subscriber acknowledged it,
so a later one silently reading nothing of them would look like lost data. A
subscriber registered before any reclaim hears nothing.

The count is the ack log's (only retention records a seq deleted); the rows and times
are what each partition's MANIFEST counted in the write that dropped the entries
(ARCHITECTURE.md §11.1, ``reclaimed``). They are named only where the MANIFEST counted
every reclaimed segment: a pass that failed between its ack-log records and its
MANIFEST step leaves some not counted until the next pass finishes it, and a store
whose MANIFEST was written before the key existed counts nothing of what went before;
the line then says how many are not recorded, never a number the records do not give.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control.manifest import RECLAIMED, Manifest, ReclaimedTotals
from quiver_spark.format import decode_frame
from quiver_spark.layout import manifest as manifest_key
from quiver_spark.segment import SegmentMeta
from quiver_spark.subscribers import Outcome
from quiver_spark.subscribers.reclaimed import utc
from quiver_spark.subscription import Subscription
from tests.faults import Fault, InjectedError
from tests.stores import int_segments, wal_in

EVENT = "quiver.subscriber.registered_late"


@pytest.fixture(params=["posix", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path, bucket: str) -> str:
    return str(tmp_path / "store") if request.param == "posix" else f"memory://{bucket}/s"


def late_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(EVENT)]


def span(metas: Iterable[SegmentMeta]) -> str:
    """``R rows ingested T0 to T1`` of these segments."""
    ms = list(metas)
    lo = min(m.min_ingestion_ns for m in ms)
    hi = max(m.max_ingestion_ns for m in ms)
    return f"{sum(m.rows for m in ms)} rows ingested {utc(lo)} to {utc(hi)}"


def reclaim(store: QuiverStore, partition: str, seqs: list[int]) -> None:
    """``exporter`` acknowledges ``seqs`` and one retention pass reclaims them."""
    store.subscribers.record("exporter", partition, seqs, Outcome.ACK)
    assert store.run_retention().deleted == {partition: seqs}


def manifest_body(store: QuiverStore, partition: str) -> dict[str, Any]:
    key = manifest_key(partition)
    got = store.objects.get(key)
    assert got is not None
    return dict(decode_frame(key, b"QMAN", got.data))


def test_a_subscriber_registered_after_a_reclaim_logs_the_segments_rows_and_times_before_it(
    root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = wal_in(tmp_path / "wal")
    metas = int_segments(root, [(0, 10), (10, 10), (20, 10)], config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        reclaim(store, "p-0", [1, 2])
        caplog.set_level(logging.INFO, logger="quiver_spark")
        with Subscription(store, "auditor") as sub:
            sub.start()
            got = sub.poll()
            assert got is not None and [m.seq for m in got.segments] == [3]
        (line,) = late_lines(caplog)
        assert line.levelno == logging.WARNING and line.name.startswith("quiver_spark.")
        assert line.getMessage() == (
            f"{EVENT} 2 segments ({span(metas[:2])}; p-0: 2 up to seq 2, 20 rows) "
            "were reclaimed before subscriber auditor was registered; it starts at p-0 seq 3"
        )
        caplog.clear()
        with Subscription(store, "auditor") as sub:  # known: said once, at registration
            sub.start()
        assert late_lines(caplog) == []


def test_a_subscriber_registered_before_any_reclaim_logs_nothing_about_it(
    root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = wal_in(tmp_path / "wal")
    int_segments(root, [(0, 10), (10, 10)], config=cfg)
    caplog.set_level(logging.INFO, logger="quiver_spark")
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        assert store.subscribers.register("exporter") is None
        with Subscription(store, "auditor") as sub:
            sub.start()
            got = sub.poll()
            assert got is not None and [m.seq for m in got.segments] == [1, 2]
        store.subscribers.record("exporter", "p-0", [1, 2], Outcome.ACK)
        store.subscribers.record("auditor", "p-0", [1, 2], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 2]}
    assert late_lines(caplog) == []


def test_rows_and_times_add_up_over_several_passes_and_partitions(
    root: str, tmp_path: Path
) -> None:
    """Segments reclaimed by three passes around one retention kept (a gap) are
    counted one by one, per partition, with the rows of each and the range of all
    their times: never the highest seq taken for a count."""
    cfg = wal_in(tmp_path / "wal")
    p0 = int_segments(root, [(0, 1), (1, 2), (3, 3), (6, 4)], config=cfg)
    p1 = int_segments(root, [(0, 5), (5, 6)], partition="p-1", config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        reg = store.subscribers
        reg.register("exporter")
        reclaim(store, "p-0", [1])
        reclaim(store, "p-1", [1])
        reclaim(store, "p-0", [3, 4])
        late = reg.register("auditor", retained={"p-0": [2], "p-1": [2]})
        assert late is not None and late.segments == 4 and late.exact
        gone = [p0[0], p0[2], p0[3], p1[0]]
        assert late.line() == (
            f"4 segments ({span(gone)}; p-0: 3 up to seq 4, 8 rows; p-1: 1 up to seq 1, "
            "5 rows) were reclaimed before subscriber auditor was registered; it starts "
            "at p-0 seq 2, p-1 seq 2"
        )
        doc = late.as_json()
        assert doc["rows"] == 13
        assert doc["min_ingestion_ns"] == min(m.min_ingestion_ns for m in gone)
        assert doc["max_ingestion_ns"] == max(m.max_ingestion_ns for m in gone)
        assert doc["partitions"]["p-0"] == {
            "segments": 3,
            "highest_seq": 4,
            "starts_at": 2,
            "recorded": {
                "segments": 3,
                "rows": 8,
                "min_ingestion_ns": p0[0].min_ingestion_ns,
                "max_ingestion_ns": p0[3].max_ingestion_ns,
            },
        }
        assert manifest_body(store, "p-0")[RECLAIMED] == {
            "segments": 3,
            "rows": 8,
            "min_ingestion_ns": p0[0].min_ingestion_ns,
            "max_ingestion_ns": p0[3].max_ingestion_ns,
        }


def test_a_pass_that_failed_before_its_manifest_step_is_not_recorded_until_the_next_pass(
    root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass records seqs 2 and 3 deleted in the ack log, then its MANIFEST write
    fails (EIO): a registration then names the rows of seq 1 and says 2 are not
    recorded; the next pass finishes the deletion in the MANIFEST write that counts
    them, and a registration after it names all three."""
    cfg = wal_in(tmp_path / "wal")
    metas = int_segments(root, [(0, 1), (1, 2), (3, 3), (6, 4)], config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        reclaim(store, "p-0", [1])
        fault = Fault("replace", 1, errno.EIO, kind="manifest")
        real = store.objects.replace

        def replace_failing(key: str, data: bytes, *, version: str) -> str:
            if fault.hit("replace", key):
                raise InjectedError(fault, key)
            return real(key, data, version=version)

        monkeypatch.setattr(store.objects, "replace", replace_failing)
        store.subscribers.record("exporter", "p-0", [2, 3], Outcome.ACK)
        with pytest.raises(OSError, match="Input/output error"):
            store.run_retention()
        assert fault.fired == 1
        late = store.subscribers.register("during")
        assert late is not None and not late.exact
        assert late.line() == (
            f"3 segments (rows and time range of 2 not recorded; the other 1: "
            f"{span(metas[:1])}; p-0: 3 up to seq 3, 1 rows of 1 (2 not recorded)) were "
            "reclaimed before subscriber during was registered; it starts at p-0 seq 4"
        )
        assert late.as_json()["rows"] is None
        store.run_retention()
        late = store.subscribers.register("after")
        assert late is not None and late.exact
        assert late.line() == (
            f"3 segments ({span(metas[:3])}; p-0: 3 up to seq 3, 6 rows) were reclaimed "
            "before subscriber after was registered; it starts at p-0 seq 4"
        )


def without_reclaimed_key(store: QuiverStore, partition: str) -> None:
    """Rewrite ``partition``'s MANIFEST with the bytes a version before the
    ``reclaimed`` key wrote (its other keys unchanged)."""
    key = manifest_key(partition)
    got = store.objects.get(key)
    assert got is not None
    m = Manifest.decode(key, got.data, got.version)
    old = replace(m, reclaimed=ReclaimedTotals()).encode()
    store.objects.replace(key, old, version=got.version or "")
    store.manifests.forget(partition)
    assert RECLAIMED not in manifest_body(store, partition)


def test_a_store_whose_manifest_predates_the_count_says_its_rows_are_not_recorded(
    root: str, tmp_path: Path
) -> None:
    """A MANIFEST without ``reclaimed`` opens and reads as a count begun at zero: what
    was reclaimed before is "not recorded"; what retention reclaims after is counted,
    and the line names the rows of those, and how many are not recorded."""
    cfg = wal_in(tmp_path / "wal")
    metas = int_segments(root, [(0, 1), (1, 2), (3, 3), (6, 4)], config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        reclaim(store, "p-0", [1, 2])
        without_reclaimed_key(store, "p-0")
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        late = store.subscribers.register("auditor")
        assert late is not None
        assert late.line() == (
            "2 segments (p-0: 2 up to seq 2; rows and time range not recorded) were "
            "reclaimed before subscriber auditor was registered; it starts at p-0 seq 3"
        )
        assert late.as_json()["partitions"]["p-0"]["recorded"] is None
        store.subscribers.record("auditor", "p-0", [3], Outcome.ACK)
        reclaim(store, "p-0", [3])
        late = store.subscribers.register("later")
        assert late is not None
        assert late.line() == (
            f"3 segments (rows and time range of 2 not recorded; the other 1: "
            f"{span(metas[2:3])}; p-0: 3 up to seq 3, 3 rows of 1 (2 not recorded)) were "
            "reclaimed before subscriber later was registered; it starts at p-0 seq 4"
        )
