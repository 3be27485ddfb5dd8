"""Published metadata is read once per process; the listing decides what exists."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=60))


def test_a_survey_reads_each_meta_once_and_never_serves_a_vanished_one(tmp_path: Path) -> None:
    with QuiverStore.open(str(tmp_path), CFG, background=False) as s:
        for i in range(5):
            s.append(pa.record_batch({"k": [i]}))
            s.finalize()
    with QuiverStore.open(str(tmp_path), CFG, partition=None, background=False) as h:
        loc = h.segment_location
        reads: list[int] = []
        real = loc.read_meta

        def counting(partition: str, seq: int):  # type: ignore[no-untyped-def]
            reads.append(seq)
            return real(partition, seq)

        loc.read_meta = counting  # type: ignore[method-assign]
        assert [m.seq for m in loc.survey("p-0").metas] == [1, 2, 3, 4, 5]
        assert sorted(reads) == [1, 2, 3, 4, 5]
        reads.clear()
        assert [m.seq for m in loc.survey("p-0").metas] == [1, 2, 3, 4, 5]
        assert reads == []  # every one from the cache
        loc.quarantine("p-0", 2, "test")
        (tmp_path / "segments" / "p-0" / f"{4:020d}.meta").unlink()  # gone by other hands
        assert [m.seq for m in loc.survey("p-0").metas] == [1, 3, 5]
        assert reads == []
