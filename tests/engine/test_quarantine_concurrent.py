"""Two concurrent quarantines (on different partitions) both succeed.

Each replacement of the quarantine mark goes through a temporary name of its own, so
one `quiver fsck --quarantine` never removes another's temporary file mid-write.
"""

from __future__ import annotations

import os
from pathlib import Path

from quiver_spark.fs import FileIO
from quiver_spark.layout import quarantine_mark
from quiver_spark.segment import SegmentLocation
from tests.stores import int_segments


class Interleaved(FileIO):
    """Runs ``other`` once, right after this process wrote its mark's tmp."""

    other = None

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        name = os.path.basename(path)  # the mark's tmp, whatever its name
        if op == "chmod" and name.startswith(quarantine_mark()) and name.endswith(".tmp"):
            run, self.other = self.other, None
            if run is not None:
                run()


def test_concurrent_quarantines_both_succeed(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)], partition="p-0")
    int_segments(tmp_path, [(0, 1)], partition="p-1")
    seg = str(tmp_path / "segments")
    io = Interleaved()
    a, b = SegmentLocation(seg, io=io), SegmentLocation(seg)
    io.other = lambda: b.quarantine("p-1", 1, "test: damaged (fsck run B)")
    try:
        a.quarantine("p-0", 1, "test: damaged (fsck run A)")
        error = None
    except OSError as e:
        error = e
    assert not a.is_published("p-0", 1) and not b.is_published("p-1", 1)  # both moved
    assert error is None, f"quarantine A moved its segment aside, then raised: {error!r}"
    assert a.quarantined_total == 1
