"""What docs/cluster.md says about a host lost with its executor-local WAL.

The store's root and segments are shared; ``wal.path`` is a directory on each host's
own disk (the same path everywhere). A writer on host H seals some rows into a
segment, then dies with more rows committed to its WAL but not yet sealed. Losing
H is simulated by moving its WAL directory away (another host has nothing at that
path); H coming back, by moving it back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.child import run_python

from .conftest import run_json


def _writer_dies_with_unsealed_rows(root: Path, wal: Path, partition: str) -> None:
    code = """
        import os, pyarrow as pa
        from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
        cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=600),
                          wal=WalConfig(path=wal))
        s = QuiverStore.open(root, cfg, partition=partition, background=False)
        s.append(pa.record_batch({"id": pa.array(range(3), type=pa.int64())}))
        s.finalize()                  # rows 0-2: a segment on shared storage
        s.append(pa.record_batch({"id": pa.array(range(3, 7), type=pa.int64())}))
        s.flush()                     # rows 3-6: acknowledged, only in the WAL
        s.writer.write_heartbeat()
        os._exit(0)
        """
    run_python(code, timeout=60, root=str(root), wal=str(wal), partition=partition)


def _partition(doc: dict, pid: str) -> dict:
    (row,) = [p for p in doc["partitions"] if p["partition"] == pid]
    return row


def test_a_lost_hosts_partition_shows_its_segments_as_stale_with_no_wal_and_returns_with_it(
    tmp_path: Path,
) -> None:
    root, wal, away = tmp_path / "shared" / "store", tmp_path / "local-wal", tmp_path / "lost"
    _writer_dies_with_unsealed_rows(root, wal, "hostH-0")
    store = str(root)
    shutil.move(wal, away)  # host H and its disk are gone

    seen_elsewhere = _partition(run_json(["status", store]), "hostH-0")
    assert seen_elsewhere["segments"] == 1 and seen_elsewhere["rows"] == 3
    assert seen_elsewhere["wal_bytes"] == 0 and seen_elsewhere["wal_files"] == 0
    assert seen_elsewhere["stale"] and seen_elsewhere["heartbeat_ns"] is None
    assert seen_elsewhere["open_segment_rows"] is None  # unknown, not zero
    gc_elsewhere = run_json(["gc", store])
    assert gc_elsewhere["finalized"] == []  # nothing of H's WAL to seal from here

    shutil.move(away, wal)  # H (or its disk) is back at the same path
    seen_on_h = _partition(run_json(["status", store]), "hostH-0")
    assert seen_on_h["wal_bytes"] > 0 and seen_on_h["stale"]
    assert seen_on_h["heartbeat_ns"] is not None and seen_on_h["open_segment_rows"] == 4
    gc_on_h = run_json(["gc", store])
    assert [f["partition"] for f in gc_on_h["finalized"]] == ["hostH-0"]
    after = _partition(run_json(["status", store]), "hostH-0")
    assert after["segments"] == 2 and after["rows"] == 7
