"""A damaged subscription record (advisory, §13.8) does not stop consumers or status.

With one flipped byte in `subscribers/records/<name>.sub`, acknowledgements of that
subscriber succeed, and `quiver subscribers list` / `quiver status` still show the
store, naming the damaged record.
"""

from __future__ import annotations

import os
from pathlib import Path

from quiver_spark.subscription import Subscription
from tests.cli.conftest import run
from tests.damage import flip_byte
from tests.stores import int_segments


def _store(root: str) -> None:
    int_segments(root, [(0, 3), (3, 3)])
    for name in ("a", "b"):
        with Subscription.open(root, name) as sub:
            sub.start()
    flip_byte(os.path.join(root, "subscribers", "records", "b.sub"), 20)


def test_ack_succeeds_with_a_damaged_subscription_record(tmp_path: Path) -> None:
    root = str(tmp_path / "q")
    _store(root)
    rows: list[int] = []
    with Subscription.open(root, "b") as sub:
        while (batch := sub.poll()) is not None:
            for meta in batch.segments:
                for rb in sub.read(meta):
                    rows += rb.column(0).to_pylist()
            sub.ack(batch.end)  # raises ChecksumMismatchError today, after recording it
    assert rows == [0, 1, 2, 3, 4, 5]


def test_status_and_list_show_the_store_with_a_damaged_subscription_record(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "q")
    _store(root)
    listed = run(["subscribers", root, "list"])
    assert "a" in listed.stdout.split(), listed.output + listed.stderr
    status = run(["status", root])
    assert "Partitions" in status.stdout, status.output + status.stderr
