"""A finalize whose STATE write fails leaves no gap in the partition's seqs.

The retry seals the same rows under the same seq (ARCHITECTURE.md §9.3), so consumers
that probe the next seq never stall at a hole.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore
from quiver_spark.fs import FileIO
from quiver_spark.layout import state_file_name, tmp
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.stores import HAND_SEALED, int_segments


class StateWriteFailsOnce(FileIO):
    armed = False

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if self.armed and op == "open" and os.path.basename(path) == tmp(state_file_name()):
            self.armed = False
            raise OSError(28, "injected: no space left on device")


def test_a_failed_state_write_leaves_no_gap_in_the_seqs(tmp_path: Path) -> None:
    int_segments(tmp_path, [(0, 1)], partition="p-0")  # seq 1
    with Subscription.open(str(tmp_path), "r") as sub:
        first = sub.next_batch_end(sub.start())
        assert first == Position({"p-0": 1})
        io = StateWriteFailsOnce()
        with QuiverStore.open(
            str(tmp_path), HAND_SEALED, partition="p-0", io=io, background=False
        ) as store:
            store.append(pa.record_batch({"k": pa.array([1], type=pa.int64())}))
            io.armed = True
            try:
                store.finalize()  # the STATE write fails
            except OSError:
                pass
            store.finalize()  # the retry publishes the rows
        published = sub.location.published_seqs("p-0")
        end = sub.next_batch_end(first)  # the consumer's next trigger
        assert end.is_after(first), f"published seqs {published}, planned nothing: {end}"
        assert published == [1, 2], f"published seqs {published}: a seq was skipped"
