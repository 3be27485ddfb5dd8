"""An acceptance horizon is any duration greater than zero (ARCHITECTURE.md §19.1):
one so long that it reaches before the epoch, even one too long to count in a float
of nanoseconds, drops nothing, and a number too large for a float is refused with the
horizon's own error, never an OverflowError from deep inside planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.spark.source_options import parse_source_options
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.horizon import cutoff, parse_horizon
from tests.stores import int_segments


@pytest.mark.parametrize("horizon", [1e300, "9" * 300 + "d", "100000000d"])
def test_a_horizon_reaching_before_the_epoch_delivers_every_segment(
    tmp_path: Path, horizon: object
) -> None:
    int_segments(str(tmp_path), [(0, 3), (3, 3)], partition="p-0")
    with Subscription.open(str(tmp_path), "s", horizon=horizon) as sub:
        start = sub.start("earliest")
        end = sub.next_batch_end(start)
        assert end.cutoff_ns == 0
        assert [m.seq for m in sub.segments(start, end)] == [1, 2]
        assert sub.ack(end) == 2


def test_the_source_option_accepts_a_very_long_horizon_and_its_cutoff_is_zero() -> None:
    opts = parse_source_options(
        {"path": "/tmp/x", "subscriber": "s", "acceptanceHorizon": "9" * 300 + "d"},
        streaming=True,
    )
    assert opts.horizon_s is not None
    assert cutoff(1_800_000_000 * 10**9, opts.horizon_s) == 0


def test_an_integer_too_large_for_a_float_is_refused_as_a_horizon() -> None:
    with pytest.raises(ConfigError, match="duration greater than zero"):
        parse_horizon(10**400)
