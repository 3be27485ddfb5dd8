"""A subscriber has one live consumer at a time.

A second consumer of a subscriber that is still being read, in this process or in
another, is refused at once with one line naming the subscriber, its live-consumer
lock and the holder (pid, host, since); a consumer that ended (closed, or dropped
without closing, as a replaced reader is) hands the subscriber over to the next one.
"""

from __future__ import annotations

import gc
import os
import socket
from pathlib import Path

import pytest

from quiver_spark.errors import SubscriberError
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.stores import int_segments


def test_a_second_consumer_of_a_subscriber_in_the_same_process_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(i * 3, 3) for i in range(3)])
    with Subscription.open(str(tmp_path), "fwd") as first:
        first.start()
        with pytest.raises(SubscriberError) as err:
            Subscription.open(str(tmp_path), "fwd")
        msg = str(err.value)
        assert "\n" not in msg
        assert "subscriber 'fwd'" in msg and "live-consumer lock" in msg
        assert f"pid {os.getpid()} on {socket.gethostname()}" in msg and "since" in msg
        assert "this process" in msg
        # the first consumer goes on undisturbed: it reads and acknowledges every row
        batch = first.poll()
        assert batch is not None and len(batch.segments) == 3
        first.ack(batch.end)
        assert first.acked() == Position({"p-0": 3})
        assert first.lost.report()["dropped"] == 0


def test_a_consumer_closed_or_dropped_without_closing_is_replaced_by_the_next(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)])
    with Subscription.open(str(tmp_path), "r") as sub:
        sub.ack(sub.next_batch_end(sub.start(), until=Position({"p-0": 1})))
    abandoned = Subscription.open(str(tmp_path), "r")  # never closed, as a replaced reader
    abandoned.start()
    del abandoned
    gc.collect()
    with Subscription.open(str(tmp_path), "r") as again:
        assert again.acked() == Position({"p-0": 1})
        batch = again.poll()
        assert batch is not None and [m.seq for m in batch.segments] == [2]


def test_a_dropped_consumer_in_a_reference_cycle_is_replaced_too(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)])
    abandoned = Subscription.open(str(tmp_path), "r")
    abandoned.cycle = abandoned  # type: ignore[attr-defined]  # freed only by the collector
    del abandoned
    with Subscription.open(str(tmp_path), "r") as again:
        again.start()
        assert again.registered()


def test_a_second_consumer_in_another_process_gets_one_line_naming_the_lock_holder(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1)])
    code = """
        from quiver_spark.subscription import Subscription
        Subscription.open(root, "fwd")
        """
    with Subscription.open(str(tmp_path), "fwd") as held:
        held.start()
        out = run_python(code, check=False, capture=True, root=str(tmp_path))
    assert out.returncode != 0
    # the traceback is the refusal alone: no chained OS error, no writer-lock wording
    assert "BlockingIOError" not in out.stderr and "LockedError" not in out.stderr
    assert "one writer per partition" not in out.stderr
    assert "During handling" not in out.stderr and "direct cause" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("quiver_spark.errors.SubscriberError: subscriber 'fwd'")
    assert "live-consumer lock" in last
    assert f"pid {os.getpid()} on {socket.gethostname()}" in last and "since" in last
    assert "give this consumer its own subscriber" in last


def test_the_subscriber_is_free_for_another_process_once_its_consumer_closed(
    tmp_path: Path,
) -> None:
    int_segments(tmp_path, [(0, 1)])
    with Subscription.open(str(tmp_path), "fwd") as sub:
        sub.start()
    code = """
        from quiver_spark.subscription import Subscription
        with Subscription.open(root, "fwd") as sub:
            print(sub.poll().end.segments)
        """
    out = run_python(code, capture=True, root=str(tmp_path))
    assert out.stdout.strip() == "{'p-0': 1}"
