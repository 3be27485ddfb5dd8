"""A STATE write that fails after its rename took effect never leads to a lost row.

The partition STATE is the finalize's commit point (ARCHITECTURE.md §9.2). Its atomic
write can fail after the rename (the directory fsync): STATE then names the new
segment on disk although the call raised. A writer that treats the failure as "not
committed" would seal more rows under the same seq and overwrite that segment's
``.arrow``; a crash before the next STATE write then leaves a partition that never
opens again. Guarantee: after any failed STATE write the writer's next call works
from what is on disk (it recovers), every flushed row is readable exactly once after
a crash at any later point, and ``quiver fsck`` never calls a segment that STATE
commits an orphan that recovery removes.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.layout import state_file_name
from tests.faults import FaultyIO
from tests.stores import SYNC_EACH, id_batch, reopened_ids, scanned_ids


def _crash_copy(root: str, to: Path) -> str:
    """What a kill -9 at this point leaves: every completed write, no lock held."""
    shutil.copytree(root, to)
    return str(to)


def _writer_past_a_failed_state_directory_fsync(root: str) -> tuple[QuiverStore, FaultyIO]:
    """A writer that flushed rows 1..3, failed the finalize's STATE directory fsync, and
    appended and flushed rows 4..6 after it."""
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(1))
    store.flush()
    io.fail("fsync_dir", 1, errno.EIO, path_contains="partitions/p-0")
    try:
        store.finalize()
    except OSError:
        pass
    store.append(id_batch(4))
    store.flush()
    return store, io


def _quiver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *args], capture_output=True, text=True
    )


def test_a_crash_after_the_retry_of_a_state_write_loses_no_flushed_row(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    store, io = _writer_past_a_failed_state_directory_fsync(root)
    io.fail("open", 1, errno.ENOSPC, path_contains=state_file_name())  # the retry's commit fails
    try:
        store.finalize()
    except OSError:
        pass
    crashed = _crash_copy(root, tmp_path / "crash")
    assert reopened_ids(crashed, SYNC_EACH) == [1, 2, 3, 4, 5, 6]
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [1, 2, 3, 4, 5, 6]


def test_the_writer_goes_on_after_a_failed_state_directory_fsync(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store, _ = _writer_past_a_failed_state_directory_fsync(root)
    store.finalize()
    assert scanned_ids(store) == [1, 2, 3, 4, 5, 6]
    assert [m.seq for m in store.segments()] == [1, 2]
    store.close()
    assert reopened_ids(root, SYNC_EACH) == [1, 2, 3, 4, 5, 6]


def test_fsck_and_gc_treat_a_segment_committed_in_state_as_pending_publication(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    io = FaultyIO()
    store = QuiverStore.open(root, SYNC_EACH, io=io, background=False)
    store.append(id_batch(1))
    store.flush()
    io.fail("open", 1, errno.EIO, path_contains=".meta")  # committed, not published
    try:
        store.finalize()
    except OSError:
        pass
    crashed = _crash_copy(root, tmp_path / "crash")
    store.close()
    fsck = _quiver("fsck", crashed, "--json")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "recovery removes" not in fsck.stdout
    assert "00000000000000000001.arrow" in fsck.stdout
    assert json.loads(fsck.stdout)
    gc = _quiver("gc", crashed)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert "run `quiver fsck" not in gc.stdout + gc.stderr
    assert reopened_ids(crashed, SYNC_EACH) == [1, 2, 3]
