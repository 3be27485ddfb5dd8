"""Why a segment is missing is a :class:`MissingKind` member on every error, equal to
the name the messages, the lost log and the metrics use, so a caller branches on the
field (an enum member or its name), never on the message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.dataloss import LossPolicy, MissingSegment
from quiver_spark.errors import DataLossError, MissingKind, SegmentMissingError
from tests.stores import int_segments

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))


def test_an_error_given_a_kind_by_name_carries_the_enum_member() -> None:
    err = SegmentMissingError("p-0", 4, "corrupt (bad bytes)", kind="corrupt")
    assert err.kind is MissingKind.CORRUPT and err.kind == "corrupt"
    assert str(err) == "segment 4 of partition p-0 is corrupt (bad bytes)"
    assert SegmentMissingError("p-0", 4).kind is MissingKind.MISSING


def test_an_unknown_kind_name_is_refused() -> None:
    with pytest.raises(ValueError, match="'gone'"):
        SegmentMissingError("p-0", 4, kind="gone")


def test_a_vanished_segment_fails_the_read_with_kind_missing_and_logs_the_name(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    int_segments(root, [(0, 1), (1, 1)], column="x")
    for suffix in (".meta", ".arrow"):
        os.remove(root / "segments" / "p-0" / f"{1:020d}{suffix}")
    with QuiverStore.open(str(root), CFG, partition=None, create=False) as store:
        policy = LossPolicy(
            str(root),
            "s",
            lost=store.kind.lost_log(str(root), "s", store.objects, store.io),
            journal=store.kind.journal,
            objects=store.objects,
            fail_on_data_loss=True,
        )
        with pytest.raises(DataLossError) as err:
            policy.settle(MissingSegment("p-0", 1, MissingKind.MISSING))
    assert err.value.kind is MissingKind.MISSING
    assert str(err.value).startswith("segment 1 of partition p-0 is missing: published, then")
    line = json.loads((root / "readers" / "s.lost.jsonl").read_text().splitlines()[0])
    assert (line["reason"], line["skipped"]) == ("missing", False)
