"""An embedded consumer names its start position as the Spark option does.

``Subscription.start`` takes a :class:`StartPosition` or the strings ``startingPosition``
accepts (``earliest``, ``latest``, ``acked``, any case); anything else is refused with
one line naming the value and the allowed ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.subscription import StartPosition, Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.stores import int_segments


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("latest", {"p-0": 3}),
        ("LATEST", {"p-0": 3}),
        (" earliest ", {"p-0": 0}),
        (StartPosition.LATEST, {"p-0": 3}),
        ("acked", {"p-0": 0}),
    ],
)
def test_start_takes_the_names_the_spark_option_takes(
    tmp_path: Path, name: object, expected: dict[str, int]
) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)])
    with Subscription.open(str(tmp_path), "s") as sub:
        assert sub.start(name) == Position(expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["newest", "", 3])
def test_an_unknown_start_position_is_refused_naming_the_allowed_values(
    tmp_path: Path, bad: object
) -> None:
    int_segments(tmp_path, [(0, 1)])
    with Subscription.open(str(tmp_path), "s") as sub:
        with pytest.raises(ConfigError) as err:
            sub.start(bad)  # type: ignore[arg-type]
        assert "earliest | latest | acked" in str(err.value) and repr(bad) in str(err.value)
        assert not sub.registered()  # refused before anything was recorded


def test_a_consumer_script_starting_at_latest_reads_only_what_comes_after(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 2)])
    code = """
        from quiver_spark.subscription import Subscription
        from tests.stores import int_segments
        with Subscription.open(root, "tail") as sub:
            start = sub.start("latest")
            int_segments(root, [(2, 2)])
            end = sub.next_batch_end(start)
            print([m.seq for m in sub.segments(start, end)])
            sub.start("newest")
        """
    out = run_python(code, check=False, capture=True, root=str(tmp_path))
    assert out.stdout.strip() == "[2]"
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "quiver_spark.errors.ConfigError: invalid value for option 'position': 'newest'; "
        "allowed: earliest | latest | acked"
    )


def test_a_new_subscriber_registered_at_acked_starts_at_the_earliest_segment(
    tmp_path: Path,
) -> None:
    """``StartPosition`` is one type for the registry and the subscription: a subscriber
    not yet registered has acknowledged nothing, so ``ACKED`` registers it as
    ``EARLIEST`` (every retained segment still to deliver)."""
    from quiver_spark.subscribers import SubscriberRegistry

    int_segments(tmp_path, [(0, 1), (1, 1), (2, 1)])
    with SubscriberRegistry.open(str(tmp_path)) as reg:
        reg.register("a", start=StartPosition.ACKED, retained={"p-0": [2, 3]})
        reg.register("l", start=StartPosition.LATEST, retained={"p-0": [2, 3]})
        assert (reg.hwm("a", "p-0"), reg.hwm("l", "p-0")) == (1, 3)
