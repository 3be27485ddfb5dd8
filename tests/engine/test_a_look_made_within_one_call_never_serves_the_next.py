"""A subscription catches the ack log up and lists the segments root at most once per
call (ARCHITECTURE.md §12): what the first look of a call found serves the rest of that
call, and never a later one. A partition that appears and an acknowledgement another
handle records after a call ended are seen by the next call, on a POSIX root and on an
object root, whether the call is one the caller opened (the Spark source's
``latestOffset``) or one a public method opens itself.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.subscription import Subscription
from tests.stores import wal_in

_BUCKETS = itertools.count()


def _write(url: str, config: StoreConfig, pid: str) -> None:
    with QuiverStore.open(url, config, partition=pid, background=False) as w:
        w.append(pa.record_batch({"id": pa.array(range(3), pa.int64())}))
        w.flush()
        w.finalize()


@pytest.fixture(params=["posix", "object"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "posix":
        return str(tmp_path / "store")
    return f"memory://looks-{next(_BUCKETS)}/store"


def test_a_partition_written_after_a_call_is_planned_by_the_next_call(
    root: str, tmp_path: Path
) -> None:
    config = wal_in(tmp_path / "wal")
    _write(root, config, "w-0")
    with Subscription.open(root, "s", config=config) as sub:
        start = sub.start("earliest")
        with sub.one_call():  # the Spark source's latestOffset
            sub.ack(start)
            first = sub.next_batch_end(start)
        assert first.segments == {"w-0": 1}
        _write(root, config, "w-1")
        with sub.one_call():
            sub.ack(start)
            assert sub.next_batch_end(start).segments == {"w-0": 1, "w-1": 1}
        _write(root, config, "w-2")
        assert sub.next_batch_end(start).segments == {"w-0": 1, "w-1": 1, "w-2": 1}


def test_an_acknowledgement_another_handle_records_is_seen_by_the_next_call(
    root: str, tmp_path: Path
) -> None:
    config = wal_in(tmp_path / "wal")
    _write(root, config, "w-0")
    with Subscription.open(root, "s", config=config, live=False) as a:
        start = a.start("earliest")
        with a.one_call():
            assert a.acked().segments == {}
            end = a.next_batch_end(start)
        with Subscription.open(root, "s", config=config, live=False) as b:
            b.ack(end)
        with a.one_call():
            assert a.acked().segments == {"w-0": 1}
            assert a.poll() is None
