"""A consumer resuming an expired subscriber from a position of its own is told so.

``subscriber.expire_after`` deregisters a subscriber that stopped acknowledging. A
consumer that comes back with a position it kept (a Spark checkpoint's offsets, an
embedded consumer's saved position) gets the same one-line "expired at ... To start
it over ..." refusal as one that calls ``start``, from whichever call it makes first,
before any row is served; a subscriber removed by hand is named as not registered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import SubscriberError
from quiver_spark.options import store_config_from_options
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.storage_time import HOUR_S, time_passes
from tests.stores import int_segments

CFG = store_config_from_options(
    {"segment.max_open_duration": "60s", "subscriber.expire_after": "1h"}
)
SAVED = Position({"p-0": 1})


def expired(root: Path) -> None:
    """Subscriber "E" read a segment, acknowledged it, then idled past expire_after."""
    int_segments(root, [(0, 1), (1, 1), (2, 1)], config=CFG)
    with Subscription.open(str(root), "E") as sub:
        sub.ack(sub.next_batch_end(sub.start(), until=SAVED))
    time_passes(root, 2 * HOUR_S)
    with QuiverStore.open(str(root), CFG, partition=None, background=False) as s:
        assert s.run_retention().expired == ["E"]


CALLS: dict[str, Callable[[Subscription], object]] = {
    "plan": lambda sub: sub.next_batch_end(SAVED),
    "segments": lambda sub: sub.segments(SAVED, Position({"p-0": 3})),
    "ack": lambda sub: sub.ack(Position({"p-0": 2})),
    "acked": lambda sub: sub.acked(),
    "nack": lambda sub: sub.nack("p-0", [2]),
    "poll": lambda sub: sub.poll(),
    "start": lambda sub: sub.start(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_call_resuming_an_expired_subscriber_gives_the_expiry_message(
    tmp_path: Path, call: str
) -> None:
    expired(tmp_path)
    with Subscription.open(str(tmp_path), "E") as sub:
        with pytest.raises(SubscriberError) as err:
            CALLS[call](sub)
        msg = str(err.value)
        assert msg.startswith("subscriber 'E' expired at ") and "\n" not in msg
        assert "subscriber.expire_after" in msg
        assert (
            f"To start it over from the retained data: quiver subscribers {tmp_path} add E" in msg
        )
        assert not sub.registered()  # nothing re-registered it


def test_a_subscriber_removed_by_hand_is_named_as_not_registered(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)], config=CFG)
    with Subscription.open(str(tmp_path), "R") as sub:
        sub.start()
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as s:
        s.subscribers.deregister("R")
    with Subscription.open(str(tmp_path), "R") as sub:
        with pytest.raises(SubscriberError) as err:
            sub.ack(Position({"p-0": 1}))
        msg = str(err.value)
        assert msg.startswith("subscriber 'R' is not registered in the store at ")
        assert f"quiver subscribers {tmp_path} add R" in msg


def test_a_consumer_process_resuming_from_its_saved_position_after_expiry_fails_clearly(
    tmp_path: Path,
) -> None:
    expired(tmp_path)
    code = """
        from quiver_spark.subscription.position import Position
        from quiver_spark.subscription import Subscription
        saved = Position({"p-0": 1})  # what this consumer kept, as a checkpoint does
        with Subscription.open(root, "E") as sub:
            end = sub.next_batch_end(saved)
            for meta in sub.segments(saved, end):
                print("row from", meta.seq)
            sub.ack(end)
        """
    out = run_python(code, check=False, capture=True, root=str(tmp_path))
    assert out.returncode != 0 and "row from" not in out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("quiver_spark.errors.SubscriberError: subscriber 'E' expired at ")
    assert last.endswith(f"quiver subscribers {tmp_path} add E")
