"""A segment is published only over a STATE that durably commits it.

When the directory fsync after STATE's rename fails, the new STATE is in the page cache
but its name may not survive a power loss. The writer discards its state and its next
call recovers in place; that recovery reads the new STATE and publishes the segment it
names. If the ``.meta`` becomes durable while the STATE that covers the segment's WAL
records does not, a power loss leaves a published segment beside WAL records that the
old STATE says are not in any segment: the next open replays them and every row of the
segment is read twice. At every crash point after the failure, each acknowledged row is
readable exactly once. The same holds when the process dies right after the failure and
a new process, finding the new STATE in the page cache, finishes the publication.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from tests.faults import CrashSimulator, FaultyIO
from tests.stores import FLUSHED_BY_CALLER, id_batch, reopened_ids, traced_new_store


def test_a_power_loss_after_a_failed_state_directory_fsync_never_duplicates_a_row(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    store.append(id_batch(0))
    store.flush()  # acknowledged
    io.fail("fsync_dir", 1, errno.EIO, path_contains=f"{os.sep}partitions{os.sep}p-0")
    with pytest.raises(OSError):
        store.finalize()  # STATE renamed, its directory fsync failed
    failed_at = next(t.index for t in io.trace if t.failed)
    store.append(id_batch(10))  # the process goes on
    store.flush()
    store.close()
    seen = []
    for state in sim.states(io.trace, points=range(failed_at + 1, len(io.trace) + 1)):
        if state.kind not in ("process", "power"):  # a power state equal to the process
            continue  # state is listed once, as the process state
        target = state.materialize(tmp_path / f"c{state.point}-{state.kind}")
        ids = Counter(reopened_ids(target, FLUSHED_BY_CALLER))
        twice = sorted(i for i, n in ids.items() if n > 1)
        if twice or not {0, 1, 2} <= set(ids):
            seen.append((state.point, io.trace[state.point - 1].op, twice))
    assert seen == []


def test_a_new_process_publishing_what_an_undurable_state_names_never_duplicates_a_row(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    store, io, sim = traced_new_store(root, FLUSHED_BY_CALLER)
    store.append(id_batch(0))
    store.flush()  # acknowledged
    io.fail("fsync_dir", 1, errno.EIO, path_contains=f"{os.sep}partitions{os.sep}p-0")
    with pytest.raises(OSError):
        store.finalize()  # STATE renamed, its directory fsync failed
    failed_at = next(t.index for t in io.trace if t.failed) + 1
    # the process dies there: the new STATE is in the page cache, its name not durable
    died = {s.kind: s for s in sim.states(io.trace, points=[failed_at])}
    store.close()
    reopened = died["process"].materialize(tmp_path / "reopened")
    sim2 = CrashSimulator(reopened, died["power"].files)  # durable: the old STATE
    io2 = FaultyIO(record_data=True)
    QuiverStore.open(reopened, FLUSHED_BY_CALLER, io=io2, background=False).close()
    seen = []
    for state in sim2.states(io2.trace):
        if state.kind != "power":
            continue
        target = state.materialize(tmp_path / f"p{state.point}")
        ids = Counter(reopened_ids(target, FLUSHED_BY_CALLER))
        if sorted(ids.elements()) != [0, 1, 2]:
            seen.append((state.point, io2.trace[state.point - 1].op, sorted(ids.elements())))
    assert seen == []
