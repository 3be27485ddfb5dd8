"""``quiver gc``: finalize idle partitions, apply retention, ``--dry-run``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from quiver_spark import QuiverStore

from .conftest import CFG, Built, kill_writer_after_append, run, run_json, tree, write_segments


def seg_files(built: Built, pid: str) -> list[str]:
    return sorted(p.name for p in (built.root / "segments" / pid).glob("*.arrow"))


def test_gc_deletes_the_segments_every_subscriber_acked(built: Built) -> None:
    doc = run_json(["gc", built.root])
    assert doc["schema"] == "quiver.gc/1" and doc["dry_run"] is False
    sizes = {m.seq: m.size_bytes for m in built.metas["p-0"]}
    # fast acked everything, slow acked p-0 seqs 1 and 3: only those two are done by all
    assert doc["deleted"] == [
        {"partition": "p-0", "seq": 1, "bytes": sizes[1], "reason": "acked"},
        {"partition": "p-0", "seq": 3, "bytes": sizes[3], "reason": "acked"},
    ]
    assert doc["freed_bytes"] == sizes[1] + sizes[3]
    assert doc["dropped"] == {} and doc["throttled"] is False
    assert seg_files(built, "p-0") == [f"{2:020d}.arrow"]
    assert len(seg_files(built, "p-1")) == 3
    status = run_json(["status", built.root])
    slow = next(s for s in status["subscribers"] if s["name"] == "slow")
    assert slow["lag_segments"] == 4  # nothing slow still needs was deleted
    assert run_json(["fsck", built.root])["healthy"] is True


def test_gc_dry_run_prints_the_plan_and_changes_nothing(built: Built) -> None:
    before = tree(built.root)
    doc = run_json(["gc", built.root, "--dry-run"])
    assert doc["dry_run"] is True
    assert [(d["partition"], d["seq"], d["reason"]) for d in doc["deleted"]] == [
        ("p-0", 1, "acked"),
        ("p-0", 3, "acked"),
    ]
    res = run(["gc", built.root, "--dry-run"])
    assert res.exit_code == 0
    assert "dry run: nothing changed" in res.stdout and "would delete 2 segment(s)" in res.stdout
    assert tree(built.root) == before


def test_gc_finalizes_an_idle_partition_left_by_a_killed_writer(built: Built) -> None:
    kill_writer_after_append(built.root, "p-2", rows=50)
    before = run_json(["status", built.root])
    p2 = next(p for p in before["partitions"] if p["partition"] == "p-2")
    assert p2["segments"] == 0 and p2["stale"] is True
    plan = run_json(["gc", built.root, "--dry-run"])
    assert plan["finalized"] == [{"partition": "p-2", "seq": None, "wal_records": 1}]
    doc = run_json(["gc", built.root])
    assert doc["finalized"] == [{"partition": "p-2", "seq": 1, "wal_records": 1}]
    res = run(["gc", built.root])
    assert "no idle partition to finalize" in res.stdout  # the second pass has nothing left
    after = run_json(["status", built.root])
    p2 = next(p for p in after["partitions"] if p["partition"] == "p-2")
    assert (p2["segments"], p2["rows"], p2["last_seq"]) == (1, 50, 1)
    with QuiverStore.open(str(built.root), CFG, partition=None, create=False) as s:
        (meta,) = s.segments("p-2")
        with s.read_segment(meta) as r:
            assert pc.sum(r.read_all()["id"]).as_py() == sum(range(50))


def test_gc_prints_what_it_finalized_and_deleted(built: Built) -> None:
    kill_writer_after_append(built.root, "p-2", rows=5)
    res = run(["gc", built.root])
    assert res.exit_code == 0
    assert "finalize idle partition p-2 into segment 1 (1 WAL records)" in res.stdout
    assert "delete 2 segment(s):" in res.stdout and "acked" in res.stdout
    assert "freed " in res.stdout


def test_gc_leaves_a_partition_with_a_live_writer_to_it(built: Built) -> None:
    with QuiverStore.open(str(built.root), CFG, partition="p-3", background=False) as store:
        store.append(pa.record_batch({"id": pa.array([1], type=pa.int64()),
                                      "name": pa.array(["x"])}))  # fmt: skip
        store.flush()
        doc = run_json(["gc", built.root])
        assert doc["finalized"] == [] and doc["skipped_live"] == ["p-3"]
        assert store.segments("p-3") == []


def test_gc_under_drop_oldest_records_dropped_for_the_subscribers_behind(built: Built) -> None:
    total = sum(m.size_bytes for ms in built.metas.values() for m in ms)
    cap = total // 2  # forces eviction beyond what both subscribers acked
    run_json(["config", built.root, "set", f"retention.size_cap={cap}",
         "retention.size_cap_policy=drop_oldest"])  # fmt: skip
    doc = run_json(["gc", built.root])  # the store's recorded policy applies
    reasons = {(d["partition"], d["seq"]): d["reason"] for d in doc["deleted"]}
    assert reasons[("p-0", 1)] == "acked" and reasons[("p-0", 3)] == "acked"
    dropped = [k for k, r in reasons.items() if r == "drop_oldest"]
    assert dropped, doc
    assert doc["dropped"]["slow"] == {
        p: sorted(s for q, s in dropped if q == p) for p in sorted({p for p, _ in dropped})
    }
    assert "fast" not in doc["dropped"]


def test_gc_under_backpressure_deletes_nothing_unacked_and_says_it_throttles(built: Built) -> None:
    run_json(["config", built.root, "set", "retention.size_cap=1KB"])
    doc = run_json(["gc", built.root])
    assert {d["reason"] for d in doc["deleted"]} == {"acked"}
    assert doc["throttled"] is True and doc["dropped"] == {}
    assert "writers are throttled" in run(["gc", built.root]).stdout


def test_gc_with_time_retention_deletes_old_segments_whatever_their_acks(built: Built) -> None:
    run_json(["config", built.root, "set", "retention.max_age=0.00000001h"])
    doc = run_json(["gc", built.root])
    assert len(doc["deleted"]) == 6
    assert {d["reason"] for d in doc["deleted"]} == {"acked", "time"}
    assert doc["dropped"]["slow"]["p-1"] == [1, 2, 3]


def test_gc_of_a_store_without_subscribers_keeps_its_segments(tmp_path: Path) -> None:
    root = tmp_path / "s"
    write_segments(root, "p-0", 2)
    before = tree(root)
    assert run_json(["gc", root, "--dry-run"])["deleted"] == []
    assert tree(root) == before
    doc = run_json(["gc", root])
    assert doc["deleted"] == []
    assert len(list((root / "segments" / "p-0").glob("*.arrow"))) == 2


def test_gc_refuses_an_option_that_contradicts_the_stores_policy(built: Built) -> None:
    run_json(["config", built.root, "set", "retention.size_cap=1GB"])
    res = run(["gc", built.root, "-o", "retention.size_cap=2GB"])
    assert res.exit_code == 2, res.output
    assert "retention.size_cap=2GB contradicts" in res.stderr and "1GB" in res.stderr
    assert f"quiver config {built.root} set retention.size_cap=" in res.stderr
