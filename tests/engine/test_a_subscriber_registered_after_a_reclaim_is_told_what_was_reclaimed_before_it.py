"""A subscriber registered after retention reclaimed segments starts with one WARNING
line (``quiver.subscriber.registered_late``) saying how many segments were reclaimed
before it existed and where it starts: retention deletes a segment once every
registered subscriber acknowledged it, so a later one silently reading nothing of them
would look like lost data. A subscriber registered before any reclaim hears nothing.
The count is the ack log's (only retention records a seq deleted); rows and times of a
deleted segment are recorded nowhere, and the line says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscribers import Outcome
from quiver_spark.subscription import Subscription
from tests.stores import int_segments, wal_in

EVENT = "quiver.subscriber.registered_late"


@pytest.fixture(params=["posix", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path, bucket: str) -> str:
    return str(tmp_path / "store") if request.param == "posix" else f"memory://{bucket}/s"


def late_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(EVENT)]


def test_a_subscriber_registered_after_a_reclaim_logs_how_many_segments_went_before_it(
    root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = wal_in(tmp_path / "wal")
    int_segments(root, [(0, 10), (10, 10), (20, 10)], config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        store.subscribers.register("exporter")
        store.subscribers.record("exporter", "p-0", [1, 2], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 2]}
        caplog.set_level(logging.INFO, logger="quiver_spark")
        with Subscription(store, "auditor") as sub:
            sub.start()
            got = sub.poll()
            assert got is not None and [m.seq for m in got.segments] == [3]
        (line,) = late_lines(caplog)
        assert line.levelno == logging.WARNING and line.name.startswith("quiver_spark.")
        assert line.getMessage() == (
            f"{EVENT} 2 segments (p-0: 2 up to seq 2; rows and time range not recorded) "
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


def test_the_count_leaves_out_seqs_never_reclaimed_and_names_each_partition(
    root: str, tmp_path: Path
) -> None:
    """Segments reclaimed around one retention kept (a gap) are counted one by one, per
    partition: never the highest seq taken for a count."""
    cfg = wal_in(tmp_path / "wal")
    int_segments(root, [(0, 1)] * 4, config=cfg)
    int_segments(root, [(0, 1)] * 2, partition="p-1", config=cfg)
    with QuiverStore.open(root, cfg, partition=None, create=False, background=False) as store:
        reg = store.subscribers
        reg.register("exporter")
        reg.record("exporter", "p-0", [1, 3, 4], Outcome.ACK)
        reg.record("exporter", "p-1", [1], Outcome.ACK)
        assert store.run_retention().deleted == {"p-0": [1, 3, 4], "p-1": [1]}
        late = reg.register("auditor", retained={"p-0": [2], "p-1": [2]})
        assert late is not None and late.segments == 4
        assert late.line() == (
            "4 segments (p-0: 3 up to seq 4; p-1: 1 up to seq 1; rows and time range not "
            "recorded) were reclaimed before subscriber auditor was registered; it starts "
            "at p-0 seq 2, p-1 seq 2"
        )
        assert late.as_json()["partitions"]["p-0"] == {
            "segments": 3,
            "highest_seq": 4,
            "starts_at": 2,
        }
