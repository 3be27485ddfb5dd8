"""A lock whose claim failed on a full disk is not held: the claim works once space returns.

Taking a partition's LOCK or a subscriber's live-consumer lock writes the holder's
name into the lock file after the ``flock``. When that write fails (a full disk), the
claim raises and nothing may stay held: once space returns, the same process and any
other process take the lock, and no refusal names a holder that does not exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.fail(f"cannot mount a 2 MB tmpfs (run as root): {(r.stderr or r.stdout).strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _store(mnt: Path) -> str:
    root = str(mnt / "s")
    with QuiverStore.open(root, background=False) as store:
        store.append(pa.record_batch({"k": pa.array([1, 2, 3])}))
        store.finalize()
    return root


def test_a_new_partition_opened_on_a_full_disk_opens_once_space_returns(small_disk: Path) -> None:
    root = _store(small_disk)
    filler = _fill(small_disk)
    with pytest.raises(OSError):
        QuiverStore.open(root, partition="p-1", background=False)
    filler.unlink()
    QuiverStore.open(root, partition="p-1", background=False).close()  # this process
    code = (
        f"from quiver_spark import QuiverStore; QuiverStore.open({root!r}, partition='p-1').close()"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr.strip().splitlines()[-1:]


def test_a_consumer_refused_by_a_full_disk_starts_once_space_returns(small_disk: Path) -> None:
    root = _store(small_disk)
    with Subscription.open(root, "c") as sub:
        sub.start()
    os.unlink(os.path.join(root, "readers", "c.lock"))  # its holder line needs a new page
    filler = _fill(small_disk)
    with pytest.raises(OSError):
        Subscription.open(root, "c")
    filler.unlink()
    with Subscription.open(root, "c") as sub:
        assert sub.registered()
