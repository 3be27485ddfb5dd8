"""The fsck engine without the CLI: typed findings, orphans and damage located."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.fsck import FsckReport, check_store

from ..damage import flip_byte
from ..stores import int_segments

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=600))


def _store(root: Path, segments: int) -> None:
    int_segments(root, [(i * 10, 10) for i in range(segments)], config=CFG)


def _check(root: Path, quarantine: bool = False, seen: list[int] | None = None) -> FsckReport:
    with QuiverStore.open(str(root), CFG, partition=None, create=False, background=False) as s:
        return check_store(s, quarantine=quarantine, progress=None if seen is None else seen.append)


def test_a_healthy_store_reports_what_it_checked(tmp_path: Path) -> None:
    _store(tmp_path, 2)
    seen: list[int] = []
    report = _check(tmp_path, seen=seen)
    assert report.healthy(strict=True)
    assert report.checked["segments"] == 2 and report.checked["store"] == 1
    assert sum(seen) >= report.checked["segment_bytes"]


def test_a_flipped_segment_byte_and_an_orphan_file_are_located(tmp_path: Path) -> None:
    _store(tmp_path, 2)
    seg_dir = tmp_path / "segments" / "p-0"
    one, two = sorted(seg_dir.glob("*.arrow"))
    flip_byte(two, os.path.getsize(two) // 2)
    orphan = seg_dir / "00000000000000000009.arrow"
    shutil.copyfile(one, orphan)
    report = _check(tmp_path)
    assert [(f.kind, f.file, f.seq) for f in report.problems] == [("segment", str(two), 2)]
    assert [(f.kind, f.file, f.seq) for f in report.warnings] == [
        ("segment_orphan", str(orphan), 9)
    ]
    assert report.healthy() is False

    report = _check(tmp_path, quarantine=True)
    assert report.quarantined == 1
    assert report.problems[0].action is not None
    assert report.problems[0].action.startswith("quarantined to ")
    assert _check(tmp_path).healthy()
