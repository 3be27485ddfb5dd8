"""``quiver status``: partitions, subscribers, heartbeats and totals."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore

from .conftest import CFG, Built, kill_writer_after_append, run, run_json, tree, write_segments


def test_status_json_reports_segments_bytes_and_rows_per_partition(built: Built) -> None:
    doc = run_json(["status", built.root])
    assert doc["schema"] == "quiver.status/1"
    assert doc["path"] == str(built.root)
    parts = {p["partition"]: p for p in doc["partitions"]}
    assert sorted(parts) == ["p-0", "p-1"]
    for pid, metas in built.metas.items():
        p = parts[pid]
        assert p["segments"] == 3
        assert p["rows"] == 300
        seg_dir = built.root / "segments" / pid  # .arrow plus .meta, as on disk
        assert p["segment_bytes"] == sum(f.stat().st_size for f in seg_dir.iterdir())
        assert p["segment_bytes"] > sum(m.size_bytes for m in metas)
        assert (p["first_seq"], p["last_seq"]) == (1, 3)
        assert p["wal_bytes"] == 0 and p["wal_files"] == 0  # truncated by finalize
        assert p["writer_live"] is False and p["stale"] is True
        assert p["error"] is None
    totals = doc["totals"]
    assert totals["segments"] == 6
    assert totals["segment_bytes"] == sum(p["segment_bytes"] for p in parts.values())
    assert totals["bytes"] == totals["segment_bytes"] + totals["wal_bytes"]
    assert totals["size_cap_bytes"] is None and totals["size_cap_used"] is None
    assert totals["subscribers"] == 2


def test_status_json_gives_each_subscriber_its_mark_gaps_and_lag(built: Built) -> None:
    before_ns = time.time_ns()
    doc = run_json(["status", built.root])
    subs = {s["name"]: s for s in doc["subscribers"]}
    assert sorted(subs) == ["fast", "slow"]
    fast = {r["partition"]: r for r in subs["fast"]["partitions"]}
    assert fast["p-0"] == {"partition": "p-0", "hwm": 3, "gaps": 0, "lag_segments": 0,
                           "lag_bytes": 0, "lag_seconds": 0.0, "head_lag_segments": 0,
                           "head_lag_seconds": 0.0, "head_lag_rows": 0, "backlog_segments": 0,
                           "backlog_bytes": 0, "backlog_rows": 0}  # fmt: skip
    assert subs["fast"]["lag_segments"] == 0
    slow = {r["partition"]: r for r in subs["slow"]["partitions"]}
    seg2 = built.metas["p-0"][1]
    assert (slow["p-0"]["hwm"], slow["p-0"]["gaps"]) == (1, 1)
    assert slow["p-0"]["lag_segments"] == 1

    def on_disk(pid: str, seq: int) -> int:  # .arrow plus .meta
        return sum(f.stat().st_size for f in (built.root / "segments" / pid).glob(f"{seq:020d}.*"))

    assert slow["p-0"]["lag_bytes"] == on_disk("p-0", 2)
    # seq 3 acknowledged above the unread 2 (as newest first leaves it): 2 is backlog
    assert (slow["p-0"]["backlog_segments"], slow["p-0"]["head_lag_segments"]) == (1, 0)
    assert slow["p-0"]["backlog_bytes"] == on_disk("p-0", 2)
    assert subs["slow"]["backlog_seconds"] == slow["p-0"]["lag_seconds"] > 0
    expected_age = (doc["now_ns"] - seg2.min_ingestion_ns) / 1e9
    assert abs(slow["p-0"]["lag_seconds"] - expected_age) < 1e-6
    assert (before_ns - seg2.min_ingestion_ns) / 1e9 <= slow["p-0"]["lag_seconds"]
    assert (slow["p-1"]["hwm"], slow["p-1"]["lag_segments"]) == (0, 3)
    assert slow["p-1"]["lag_bytes"] == sum(on_disk("p-1", m.seq) for m in built.metas["p-1"])
    assert subs["slow"]["lag_segments"] == 4
    oldest = min(seg2.min_ingestion_ns, built.metas["p-1"][0].min_ingestion_ns)
    assert abs(subs["slow"]["lag_seconds"] - (doc["now_ns"] - oldest) / 1e9) < 1e-6


def test_status_table_shows_partitions_subscribers_and_totals(built: Built) -> None:
    res = run(["status", built.root])
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "Partitions" in out and "Subscribers" in out
    lines = out.splitlines()
    p0 = next(line for line in lines if line.startswith("p-0 "))
    assert p0.split()[1] == "3" and "stale" in p0
    slow_p0 = next(line for line in lines if line.startswith("slow ") and " p-0 " in line)
    assert slow_p0.split()[2:5] == ["1", "1", "1"]  # hwm, gaps, lag segments
    assert "Total: 2 partitions, 6 segments" in out
    assert "no size cap configured" in out


def test_status_compares_totals_with_the_stores_size_cap_without_options(built: Built) -> None:
    run_json(["config", built.root, "set", "retention.size_cap=1MB"])
    doc = run_json(["status", built.root])  # no option: the recorded policy
    t = doc["totals"]
    assert t["size_cap_bytes"] == 1024 * 1024
    assert abs(t["size_cap_used"] - t["bytes"] / (1024 * 1024)) < 1e-12
    assert t["size_cap_policy"] == "backpressure"
    assert doc["policy"]["retention.size_cap"] == "1MB" and doc["policy"]["generation"] == 2
    run_json(["config", built.root, "set", "retention.size_cap_policy=DROP_OLDEST"])
    res = run(["status", built.root])
    assert "of size cap 1.0MB" in res.stdout and "drop_oldest" in res.stdout
    assert "generation 3" in res.stdout


def test_status_of_a_store_whose_writer_set_a_cap(tmp_path: Path) -> None:
    from quiver_spark.options import store_config_from_options

    opts = {"retention.size_cap": "2MB", "retention.size_cap_policy": "drop_oldest"}
    with QuiverStore.open(str(tmp_path), store_config_from_options(opts)) as s:
        s.append(pa.record_batch({"x": [1, 2, 3]}))
    doc = run_json(["status", str(tmp_path)])
    assert doc["totals"]["size_cap_bytes"] == 2 * 1024 * 1024
    assert doc["totals"]["size_cap_policy"] == "drop_oldest"


def test_a_yaml_config_that_agrees_with_the_policy_is_accepted(
    built: Built, tmp_path: Path
) -> None:
    run_json(
        [
            "config",
            built.root,
            "set",
            "retention.size_cap=2MB",
            "retention.size_cap_policy=drop_oldest",
        ]
    )
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text("retention:\n  size_cap: 2MB\n  size_cap_policy: drop_oldest\n")
    doc = run_json(["status", built.root, "--config", cfg])
    assert doc["totals"]["size_cap_bytes"] == 2 * 1024 * 1024
    # a file or option that contradicts it is refused
    res = run(["status", built.root, "--config", cfg, "-o", "retention.size_cap=3MB"])
    assert res.exit_code == 2, res.output
    assert "contradicts" in res.stderr


def test_status_shows_a_killed_writer_as_stale_with_its_last_heartbeat(built: Built) -> None:
    kill_writer_after_append(built.root, "p-2", rows=50)
    time.sleep(0.2)
    doc = run_json(["status", built.root])
    p2 = next(p for p in doc["partitions"] if p["partition"] == "p-2")
    assert p2["open_segment_age_s"] >= 0.2  # its rows have waited since the writer died
    assert p2["writer_live"] is False and p2["stale"] is True
    assert p2["segments"] == 0 and p2["wal_bytes"] > 0
    assert p2["open_segment_rows"] == 50 and p2["open_segment_bytes"] > 0
    assert p2["last_write_ns"] is not None and p2["last_write_ns"] <= doc["now_ns"]
    assert p2["pending_txns"] == 0
    assert isinstance(p2["writer_pid"], int)
    res = run(["status", built.root])
    line = next(row for row in res.stdout.splitlines() if row.startswith("p-2 "))
    assert "stale" in line and " ago)" in line


def test_status_shows_a_running_writer_as_live_with_its_open_segment(built: Built) -> None:
    with QuiverStore.open(str(built.root), CFG, partition="p-3", background=False) as store:
        store.append(pa.record_batch({"id": pa.array([1, 2], type=pa.int64()),
                                      "name": pa.array(["a", "b"])}))  # fmt: skip
        store.flush()
        store.maintain()
        time.sleep(0.05)
        doc = run_json(["status", built.root])
        p3 = next(p for p in doc["partitions"] if p["partition"] == "p-3")
        assert p3["writer_live"] is True and p3["stale"] is False
        assert p3["open_segment_rows"] == 2
        assert p3["open_segment_age_s"] >= 0.05
        assert p3["last_write_age_s"] >= 0.05
        line = next(r for r in run(["status", built.root]).stdout.splitlines()
                    if r.startswith("p-3 "))  # fmt: skip
        assert " live" in line


def test_status_changes_nothing_on_disk(built: Built) -> None:
    before = tree(built.root)
    run_json(["status", built.root])
    assert tree(built.root) == before


def test_status_finds_wal_and_segments_at_relocated_paths(tmp_path: Path) -> None:
    from quiver_spark.options import store_config_from_options

    root, wal, segs = tmp_path / "store", tmp_path / "wal", tmp_path / "segs"
    cfg = store_config_from_options({"wal.path": str(wal), "segment.path": str(segs)})
    with QuiverStore.open(str(root), cfg, partition="p-0", background=False) as store:
        store.append(pa.record_batch({"id": pa.array([1, 2, 3], type=pa.int64())}))
        store.finalize()
    doc = run_json(["status", root, "--wal-path", wal, "--segments-path", segs])
    (p0,) = doc["partitions"]
    assert p0["segments"] == 1 and p0["rows"] == 3 and p0["wal_bytes"] == 0
    assert doc["wal_root"] == str(wal)
    # the store remembers where its segments went; the WAL location must be given
    doc = run_json(["status", root])
    assert doc["partitions"][0]["segments"] == 1


def test_status_of_an_empty_store_lists_nothing(tmp_path: Path) -> None:
    write_segments(tmp_path / "s", "p-0", 0)
    doc = run_json(["status", tmp_path / "s"])
    assert doc["subscribers"] == [] and doc["totals"]["segments"] == 0
    res = run(["status", tmp_path / "s"])
    assert "(none)" in res.stdout


def test_status_ignores_a_stray_directory_among_the_partitions(built: Built) -> None:
    (built.root / "partitions" / "lost+found").mkdir()
    doc = run_json(["status", built.root])
    assert [p["partition"] for p in doc["partitions"]] == ["p-0", "p-1"]
    assert run_json(["fsck", built.root])["healthy"] is True
    assert run(["gc", built.root, "--dry-run"]).exit_code == 0
