"""A consumer whose listing fails after the quarantine mark changed still sees the quarantine.

The consumer keeps the old mark until a listing succeeds, so its next plan lists
again: the segments after a quarantined one are planned and the quarantine reported
without waiting for the periodic listing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import DataLossError
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import int_segments


def test_a_failed_listing_after_a_quarantine_does_not_hide_it(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1), (1, 1)], partition="p-0")
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(sub.start())
        assert first == Position({"p-0": 2})
        int_segments(tmp_path, [(2, 1), (3, 1), (4, 1)], partition="p-0")  # seqs 3, 4, 5
        with QuiverStore.open(str(tmp_path), partition=None, create=False) as other:
            other.segment_location.quarantine("p-0", 3, "test: damaged")
        loc = sub.location
        real = loc.published_seqs
        calls = {"n": 0}

        def flaky(p: str) -> list[int]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("transient listing error")
            return real(p)

        loc.published_seqs = flaky  # type: ignore[method-assign]
        with pytest.raises(OSError):
            sub.next_batch_end(first)  # the listing prompted by the new mark fails once
        # the next trigger: the quarantine must still be noticed, and seqs 4, 5 planned
        end = sub.next_batch_end(first)
        assert end == Position({"p-0": 5}), end
        with pytest.raises(DataLossError, match="quarantine"):
            sub.segments(first, end)
