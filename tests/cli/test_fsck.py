"""``quiver fsck``: every checksum verified, problems located, quarantine, exit codes."""

from __future__ import annotations

import os
from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark import format as fmt

from .conftest import CFG, Built, flip_byte, kill_writer_after_append, run, run_json, tree


def seg_path(root: Path, pid: str, seq: int, suffix: str = ".arrow") -> Path:
    return root / "segments" / pid / f"{seq:020d}{suffix}"


def wal_files(root: Path, pid: str) -> list[Path]:
    return sorted((root / "partitions" / pid / "wal").glob("*.wal"))


def test_fsck_of_a_healthy_store_exits_0_and_counts_what_it_checked(built: Built) -> None:
    before = tree(built.root)
    doc = run_json(["fsck", built.root])
    assert doc["schema"] == "quiver.fsck/1"
    assert doc["healthy"] is True and doc["problems"] == [] and doc["warnings"] == []
    c = doc["checked"]
    assert c["store"] == 1 and c["states"] == 2 and c["segments"] == 6
    assert c["segment_bytes"] == sum(m.size_bytes for ms in built.metas.values() for m in ms)
    # every record is in a finalized segment, so finalize truncated the whole WAL
    assert c["wal_files"] == 0 and c["subscriber_files"] >= 1
    res = run(["fsck", built.root])
    assert res.exit_code == 0 and "healthy: 0 problem(s)" in res.stdout
    assert tree(built.root) == before


def test_fsck_names_a_segment_with_a_flipped_byte_and_exits_1(built: Built) -> None:
    bad = seg_path(built.root, "p-1", 2)
    flip_byte(bad, os.path.getsize(bad) // 2)
    doc = run_json(["fsck", built.root], code=1)
    assert doc["healthy"] is False
    (p,) = doc["problems"]
    assert (p["kind"], p["file"], p["partition"], p["seq"]) == ("segment", str(bad), "p-1", 2)
    assert "crc mismatch" in p["reason"] and p["offset"] == 0 and p["action"] is None
    assert doc["quarantined"] == 0
    res = run(["fsck", built.root])
    assert res.exit_code == 1
    assert f"PROBLEM segment: {bad}:0: segment crc mismatch" in res.stdout
    assert "UNHEALTHY: 1 problem(s)" in res.stdout
    assert bad.exists()  # without --quarantine nothing moves


def test_fsck_quarantine_moves_the_corrupt_segment_aside_and_a_rerun_is_healthy(
    built: Built,
) -> None:
    bad = seg_path(built.root, "p-0", 3)
    flip_byte(bad, 100)
    doc = run_json(["fsck", built.root, "--quarantine"], code=1)
    assert doc["quarantined"] == 1
    (p,) = doc["problems"]
    qdir = built.root / "segments" / "p-0" / "quarantine"
    assert p["action"] == f"quarantined to {qdir / bad.name}"
    assert not bad.exists() and not seg_path(built.root, "p-0", 3, ".meta").exists()
    assert (qdir / bad.name).exists() and (qdir / f"{3:020d}.meta").exists()
    assert "crc mismatch" in (qdir / f"{3:020d}.reason").read_text()
    assert run_json(["fsck", built.root])["healthy"] is True
    status = run_json(["status", built.root])
    assert next(p for p in status["partitions"] if p["partition"] == "p-0")["segments"] == 2
    # the sequence number of a quarantined segment is never reused
    with QuiverStore.open(str(built.root), CFG, partition="p-0", background=False) as s:
        assert s.recovery is not None and s.recovery.next_segment_seq == 4


def test_fsck_quarantine_leaves_a_partition_with_a_live_writer_alone(built: Built) -> None:
    bad = seg_path(built.root, "p-0", 1)
    flip_byte(bad, 50)
    with QuiverStore.open(str(built.root), CFG, partition="p-0", background=False):
        doc = run_json(["fsck", built.root, "--quarantine"], code=1)
    (p,) = doc["problems"]
    assert p["action"].startswith("not quarantined:") and "locked" in p["action"]
    assert doc["quarantined"] == 0 and bad.exists()


def test_fsck_reports_a_corrupt_segment_meta_with_its_file(built: Built) -> None:
    meta = seg_path(built.root, "p-0", 2, ".meta")
    flip_byte(meta, os.path.getsize(meta) - 3)
    doc = run_json(["fsck", built.root, "--quarantine"], code=1)
    (p,) = doc["problems"]
    assert (p["kind"], p["file"], p["seq"]) == ("segment_meta", str(meta), 2)
    assert "crc mismatch" in p["reason"]
    assert doc["quarantined"] == 1 and not meta.exists()


def test_fsck_reports_a_torn_wal_tail_without_cutting_it(built: Built) -> None:
    kill_writer_after_append(built.root, "p-2", rows=40)
    (wal,) = wal_files(built.root, "p-2")
    good = os.path.getsize(wal)
    with open(wal, "ab") as f:  # half a record header: what a crash mid-append leaves
        f.write(b"\x11\x22\x33\x44\x40\x00\x00\x00\x02\x00\x00\x00\x05\x00")
    torn_size = os.path.getsize(wal)
    doc = run_json(["fsck", built.root])
    assert doc["healthy"] is True and doc["problems"] == []
    (w,) = doc["warnings"]
    assert (w["kind"], w["file"], w["offset"], w["partition"]) == (
        "wal_torn_tail",
        str(wal),
        good,
        "p-2",
    )
    assert f"{torn_size - good} bytes" in w["reason"]
    assert os.path.getsize(wal) == torn_size  # reported, not cut
    res = run(["fsck", built.root])
    assert res.exit_code == 0 and f"WARNING wal_torn_tail: {wal}:{good}" in res.stdout
    assert run(["fsck", built.root, "--strict"]).exit_code == 1


def test_fsck_reports_damage_in_the_middle_of_a_wal_file_with_its_offset(built: Built) -> None:
    kill_writer_after_append(built.root, "p-2", rows=40)
    kill_writer_after_append(built.root, "p-2", rows=40)  # recovery + more records after
    files = wal_files(built.root, "p-2")
    first = files[0]
    offset = fmt.WAL_HEADER_SIZE + fmt.WAL_RECORD_SIZE + 4  # inside the first record's payload
    flip_byte(first, offset)
    size = os.path.getsize(first)
    doc = run_json(["fsck", built.root], code=1)
    wal_problems = [p for p in doc["problems"] if p["kind"] == "wal"]
    assert wal_problems and wal_problems[0]["file"] == str(first)
    assert wal_problems[0]["offset"] == fmt.WAL_HEADER_SIZE
    assert "crc mismatch" in wal_problems[0]["reason"]
    assert os.path.getsize(first) == size


def test_fsck_reports_a_corrupt_partition_state(built: Built) -> None:
    state = built.root / "partitions" / "p-1" / "STATE"
    flip_byte(state, 20)
    doc = run_json(["fsck", built.root], code=1)
    (p,) = doc["problems"]
    assert (p["kind"], p["file"], p["partition"]) == ("state", str(state), "p-1")


def test_fsck_reports_a_corrupt_store_descriptor(built: Built) -> None:
    store_file = built.root / "STORE"
    flip_byte(store_file, 2)
    doc = run_json(["fsck", built.root], code=1)
    assert [p["kind"] for p in doc["problems"]] == ["store"]
    assert doc["problems"][0]["file"] == str(store_file)
    assert doc["checked"]["segments"] == 6  # the rest is still checked


def test_fsck_reports_a_corrupt_ack_record_with_its_offset(built: Built) -> None:
    (log,) = sorted((built.root / "subscribers").glob("ack-*.log"))
    flip_byte(log, 32 + 32 + 5)  # inside the second record
    before = tree(built.root)
    doc = run_json(["fsck", built.root], code=1)
    (p,) = doc["problems"]
    assert (p["kind"], p["file"], p["offset"]) == ("subscribers", str(log), 64)
    assert tree(built.root) == before


def test_fsck_reports_a_corrupt_commit_record(built: Built) -> None:
    with QuiverStore.open(str(built.root), CFG, partition="p-0", background=False) as s:
        assert s.commit_txn("query-1", 7, [("p-0", 1)], rows=3)
    commit = built.root / "commits" / "query-1" / f"{7:020d}.commit"
    assert run_json(["fsck", built.root])["checked"]["commits"] == 1
    flip_byte(commit, os.path.getsize(commit) - 1)
    doc = run_json(["fsck", built.root], code=1)
    (p,) = doc["problems"]
    assert (p["kind"], p["file"]) == ("commit", str(commit))


def test_fsck_shows_a_progress_bar_on_stderr_unless_json(built: Built) -> None:
    res = run(["fsck", built.root, "--progress"])
    assert res.exit_code == 0 and "verifying" in res.stderr
    res = run(["fsck", built.root, "--json"])
    assert res.stderr == ""
    res = run(["fsck", built.root])  # CliRunner's stderr is not a terminal
    assert res.stderr == ""


def test_fsck_passes_over_the_objects_lock_files_of_a_posix_root(built: Built) -> None:
    """They order conditional writes and hold no data: whatever is in them is no finding."""
    locks = [p for p in built.root.rglob(".objects.lock")]
    assert locks, "the store has no .objects.lock file"
    readers = built.root / "readers"
    readers.mkdir(exist_ok=True)
    for path in [*locks, readers / ".objects.lock"]:
        path.write_bytes(b"\xff not json, not a frame")
    doc = run_json(["fsck", built.root])
    assert doc["problems"] == [] and doc["warnings"] == [], doc
