"""Expiry leaves its tombstone before anyone can see the subscriber deregistered.

A consumer starting while a retention pass expires its subscriber either sees it
registered (and keeps its position) or expired (and is refused naming when and why);
it never starts over and rereads acknowledged rows.
"""

from __future__ import annotations

import threading
from pathlib import Path

from quiver_spark import QuiverStore
from quiver_spark.errors import SubscriberError
from quiver_spark.fs import FileIO
from quiver_spark.subscription import Subscription
from tests.storage_time import time_passes
from tests.stores import HAND_SEALED, int_segments


class SlowTombstoneIO(FileIO):
    """The retention process's file layer: the record write of ``b`` waits for a go."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()

    def atomic_write(self, path: str, data: bytes) -> None:
        if path.endswith("b.sub"):
            self.reached.set()
            self.go.wait(10)
        super().atomic_write(path, data)


def test_consumer_starting_during_expiry_never_rereads_acknowledged_rows(tmp_path: Path) -> None:
    root = str(tmp_path / "q")
    int_segments(root, [(0, 3), (3, 3)])
    with Subscription.open(root, "slow") as slow:  # registered first: pins every segment
        slow.start()
    with Subscription.open(root, "b") as sub:  # b reads and acknowledges everything
        batch = sub.poll()
        assert batch is not None
        for meta in batch.segments:
            list(sub.read(meta))
        sub.ack(batch.end)
    with Subscription.open(root, "slow"):  # live while the pass runs: never expired
        with QuiverStore.open(root, HAND_SEALED, partition=None, background=False) as st:
            st.set_policy({"subscriber.expire_after": 1.0})
        time_passes(root, 60)  # b is now idle past subscriber.expire_after

        io = SlowTombstoneIO()
        gc = QuiverStore.open(root, HAND_SEALED, partition=None, background=False, io=io)
        errors: list[BaseException] = []

        def retention() -> None:
            try:
                gc.run_retention()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=retention)
        t.start()
        try:
            assert io.reached.wait(10), "the pass did not expire b"
            reread: list[int] = []
            refused = None
            try:
                with Subscription.open(root, "b") as sub:
                    while (batch := sub.poll()) is not None:
                        for meta in batch.segments:
                            for rb in sub.read(meta):
                                reread += rb.column(0).to_pylist()
                        sub.ack(batch.end)
            except SubscriberError as e:
                refused = e
        finally:
            io.go.set()
            t.join()
            gc.close()
    assert not errors, errors
    assert reread == [], f"acknowledged rows delivered again to b after its expiry: {reread}"
    assert refused is not None, "a consumer of an expired subscriber must fail saying so"
