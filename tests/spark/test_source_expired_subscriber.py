"""A query restarted from its checkpoint after its subscriber expired fails clearly.

``subscriber.expire_after`` deregistered the subscriber while its query was down; the
restarted query (offsets in its checkpoint, so ``initialOffset`` is never called)
fails with the documented "expired at ... To start it over ..." line instead of an
unknown-subscriber error, and reads nothing.
"""

from __future__ import annotations

import time

import pytest

from quiver_spark import QuiverStore
from quiver_spark.options import store_config_from_options
from quiver_spark.subscribers.live import FlockLive
from tests.storage_time import HOUR_S, time_passes
from tests.stores import int_segments

from .source_helpers import Collector, run_available_now, stream

CFG = store_config_from_options(
    {"segment.max_open_duration": "60s", "subscriber.expire_after": "1h"}
)


def test_a_query_resuming_an_expired_subscriber_from_its_checkpoint_gets_the_expiry_message(
    spark, tmp_path
):
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    int_segments(root, [(0, 5), (5, 5)], config=CFG)
    seen = Collector()
    run_available_now(stream(spark, root, "E"), ckpt, seen)
    assert seen.keys() == list(range(10))
    int_segments(root, [(10, 5)], config=CFG)
    # PySpark runs the reader's stop() when its worker sees the socket close, after the
    # query has terminated: until then the consumer is live, and live is never expired
    deadline = time.monotonic() + 60
    while FlockLive(root).is_live("E") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not FlockLive(root).is_live("E"), "the stopped query's reader never released 'E'"
    time_passes(root, 2 * HOUR_S)
    with QuiverStore.open(root, CFG, partition=None, background=False) as s:
        assert s.run_retention().expired == ["E"]
    before = len(seen.calls)
    q = (
        stream(spark, root, "E").writeStream.foreachBatch(seen)
        .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(Exception) as err:  # Spark's StreamingQueryException
        q.awaitTermination(120)
    text = str(err.value)
    assert "SubscriberError: subscriber 'E' expired at " in text
    assert f"To start it over from the retained data: quiver subscribers {root} add E" in text
    assert "unknown subscriber" not in text
    assert len(seen.calls) == before  # nothing read for it
