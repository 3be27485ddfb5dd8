"""`quiver gc` reports a partition whose WAL is damaged, as it does a damaged STATE.

The partition is listed under `unreadable_partitions` and gc exits 1, so cron never
sees success while acknowledged rows sit unreadable.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.child import run_python
from tests.cli.conftest import run_json
from tests.damage import flip_byte


def test_gc_reports_a_partition_whose_wal_is_damaged(tmp_path: Path) -> None:
    root = str(tmp_path / "q")
    run_python(
        """
        import os, pyarrow as pa
        from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
        cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))
        st = QuiverStore.open(root, cfg, partition="p-1", background=False)
        st.append(pa.record_batch({"k": pa.array([1, 2], type=pa.int64())}))
        st.flush()
        os._exit(0)  # acknowledged, never sealed
        """,
        root=root,
    )
    wal_dir = os.path.join(root, "partitions", "p-1", "wal")
    (wal,) = os.listdir(wal_dir)
    flip_byte(os.path.join(wal_dir, wal), 20)  # inside the header's CRC-covered bytes

    doc = run_json(["gc", root], code=1)
    assert [u["partition"] for u in doc["unreadable_partitions"]] == ["p-1"], doc
