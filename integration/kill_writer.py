"""A writer process for the kill -9 loop: appends numbered rows and reports acks.

Usage: python kill_writer.py STORE_DIR START_ID [FLUSH_INTERVAL]
(the kill loop forks after imports and calls :func:`write_forever` instead).

Appends batches of consecutive ids starting at START_ID. After each ``flush()``
returns it prints the highest acknowledged id on stdout, so whoever kills this
process knows exactly which rows were acknowledged. Finalizes now and then, so
kills land in every phase (append, group fsync, finalize, WAL truncation).
"""

from __future__ import annotations

import os
import random
import sys

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig


def write_forever(root: str, next_id: int, flush_interval: float, out: int) -> None:
    """Append and acknowledge until killed; acks are written to file descriptor ``out``."""
    config = StoreConfig(
        wal=WalConfig(flush_interval_s=flush_interval, file_size_bytes=256 * 1024),
        segment=SegmentConfig(target_size_bytes=512 * 1024, max_open_duration_s=0.2),
    )
    rng = random.Random(next_id)
    store = QuiverStore.open(root, config, partition="p-0")
    os.write(out, b"open\n")
    while True:
        n = rng.randint(1, 2000)
        ids = pa.array(range(next_id, next_id + n), type=pa.int64())
        batch = pa.record_batch({"id": ids, "payload": pa.array([b"x" * 40] * n)})
        store.append(batch)
        next_id += n
        if rng.random() < 0.5:
            store.flush()
            os.write(out, f"acked {next_id - 1}\n".encode())
        if rng.random() < 0.05:
            store.finalize()


def main() -> None:
    root, next_id = sys.argv[1], int(sys.argv[2])
    flush_interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.025
    write_forever(root, next_id, flush_interval, sys.stdout.fileno())


if __name__ == "__main__":
    main()
