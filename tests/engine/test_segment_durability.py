"""Publication order, fsyncs, read-only files, sequence reuse and cleanup of local segments."""

from __future__ import annotations

import os
import stat

import pytest

from quiver_spark.errors import SegmentExistsError, SegmentMissingError
from quiver_spark.segment import SegmentLocation
from tests.engine.segment_helpers import RecordingIO, int_batches, write_simple

A1 = "00000000000000000001.arrow"
M1 = "00000000000000000001.meta"


@pytest.fixture
def rio() -> RecordingIO:
    return RecordingIO()


@pytest.fixture
def loc(tmp_path, rio) -> SegmentLocation:
    return SegmentLocation(str(tmp_path / "segments"), io=rio)


def test_published_files_are_read_only(loc, tmp_path):
    write_simple(loc, 1)
    for name in (A1, M1):
        mode = stat.S_IMODE(os.stat(tmp_path / "segments" / "p0" / name).st_mode)
        assert mode == 0o444, (name, oct(mode))


def test_arrow_is_durable_before_the_meta_exists(loc, rio, tmp_path):
    write_simple(loc, 1)
    pdir = str(tmp_path / "segments" / "p0")
    create_tmp = rio.index("open", A1 + ".tmp")
    chmod = rio.index("chmod", A1 + ".tmp", create_tmp)
    fsync = rio.index("fsync", A1 + ".tmp", create_tmp)
    rename = rio.index("rename", A1, fsync)
    dir_sync = rio.index("fsync_dir", pdir, rename)
    meta_open = rio.index("open", M1 + ".tmp")
    assert create_tmp < chmod < fsync < rename < dir_sync < meta_open
    meta_fsync = rio.index("fsync", M1 + ".tmp", meta_open)
    meta_rename = rio.index("rename", M1, meta_fsync)
    assert rio.index("fsync_dir", pdir, meta_rename) > meta_rename
    # no operation ever writes the final names directly
    assert not [op for op in rio.ops if op[0] in ("open", "write") and op[1].endswith((A1, M1))]


def test_delete_unpublishes_then_removes_with_directory_fsyncs(loc, rio, tmp_path):
    write_simple(loc, 1)
    write_simple(loc, 2)
    rio.ops.clear()
    loc.delete("p0", [1, 2])
    pdir = str(tmp_path / "segments" / "p0")
    ops = [
        (op, os.path.basename(p) if op == "unlink" else p)
        for op, p in rio.ops
        if op not in ("listdir", "stat")  # read-only probes
    ]
    assert ops == [
        ("unlink", M1),
        ("unlink", "00000000000000000002.meta"),
        ("fsync_dir", pdir),
        ("unlink", A1),
        ("unlink", "00000000000000000002.arrow"),
        ("fsync_dir", pdir),
    ]
    assert loc.list("p0") == []
    assert os.listdir(pdir) == []


def test_delete_is_idempotent(loc):
    write_simple(loc, 1)
    loc.delete("p0", [1])
    loc.delete("p0", [1, 99])
    assert loc.list("p0") == []


def test_write_refuses_an_existing_seq_with_other_content(loc):
    write_simple(loc, 1)
    with pytest.raises(SegmentExistsError, match=M1):
        loc.write(
            "p0",
            1,
            int_batches(1, 3),
            min_ingestion_ns=0,
            max_ingestion_ns=0,
            wal_ranges=[(10, 19)],
        )
    with loc.open(loc.read_meta("p0", 1)) as r:
        assert r.read_all().num_rows == 10_000


def test_writing_the_same_segment_again_returns_the_published_meta(loc, rio):
    first = write_simple(loc, 1)
    rio.ops.clear()
    again = write_simple(loc, 1)
    assert again == first
    assert not [op for op in rio.ops if op[0] in ("open", "rename", "unlink")]


def test_two_phase_publish_makes_the_segment_visible_only_at_publish(loc):
    meta = loc.write_data(
        "p0", 1, int_batches(2, 10), min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[(1, 2)]
    )
    assert not loc.is_published("p0", 1)
    assert loc.list("p0") == []
    loc.publish(meta)
    loc.publish(meta)  # idempotent
    assert loc.is_published("p0", 1)
    assert loc.list("p0") == [meta]


def test_publish_refuses_when_the_arrow_file_is_gone(loc, tmp_path):
    meta = loc.write_data(
        "p0", 1, int_batches(2, 10), min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[(1, 2)]
    )
    os.unlink(tmp_path / "segments" / "p0" / A1)
    with pytest.raises(SegmentMissingError, match="not publishable"):
        loc.publish(meta)
    assert not loc.is_published("p0", 1)


def test_cleanup_removes_tmp_and_orphan_arrow_and_reports_the_max_seq(loc, tmp_path):
    write_simple(loc, 1)
    write_simple(loc, 2)
    pdir = tmp_path / "segments" / "p0"
    (pdir / "00000000000000000003.arrow").write_bytes(b"interrupted finalize")
    (pdir / "00000000000000000004.meta.tmp").write_bytes(b"torn")
    (pdir / "00000000000000000009.arrow.tmp").write_bytes(b"torn")
    report = loc.cleanup("p0")
    assert sorted(os.path.basename(p) for p in report.removed) == [
        "00000000000000000003.arrow",
        "00000000000000000004.meta.tmp",
        "00000000000000000009.arrow.tmp",
    ]
    assert report.max_seq_seen == 9
    assert sorted(os.listdir(pdir)) == [
        A1,
        M1,
        "00000000000000000002.arrow",
        "00000000000000000002.meta",
    ]
    assert [m.seq for m in loc.list("p0")] == [1, 2]
    again = loc.cleanup("p0")
    assert (again.removed, again.max_seq_seen) == ([], 2)


def test_cleanup_of_an_unknown_partition_reports_nothing(loc):
    report = loc.cleanup("never")
    assert (report.removed, report.max_seq_seen) == ([], 0)


def test_cleanup_counts_quarantined_seqs_in_the_floor(loc):
    write_simple(loc, 5)
    loc.quarantine("p0", 5, "test")
    assert loc.cleanup("p0").max_seq_seen == 5


def test_a_stale_read_only_tmp_does_not_block_the_next_write(loc, tmp_path):
    pdir = tmp_path / "segments" / "p0"
    pdir.mkdir(parents=True)
    stale = pdir / (A1 + ".tmp")
    stale.write_bytes(b"left by a crash")
    os.chmod(stale, 0o444)
    meta = write_simple(loc, 1)
    assert loc.list("p0") == [meta]
    assert not stale.exists()


def test_invalid_partition_names_are_refused(loc):
    with pytest.raises(ValueError, match="partition"):
        write_simple(loc, 1, partition="../escape")
    with pytest.raises(ValueError, match="seq"):
        loc.write("p0", 0, int_batches(1, 1), min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[])
