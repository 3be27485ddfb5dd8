"""Shared helpers for the segment tests: sample data, recording and failing I/O (damage: tests/damage.py)."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.implementations.memory import MemoryFileSystem

from quiver_spark.fs import FileIO
from quiver_spark.segment import SegmentLocation, SegmentMeta

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("point", pa.struct([("x", pa.int32()), ("y", pa.int32())])),
    ]
)


def mixed_batch(start: int, rows: int) -> pa.RecordBatch:
    """A batch of every common type, with nulls in each column; ids start at ``start``."""
    ids = list(range(start, start + rows))
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return pa.record_batch(
        [
            pa.array(ids, pa.int64()),
            pa.array([None if i % 7 == 0 else f"name-{i}" for i in ids]),
            pa.array(
                [None if i % 11 == 0 else base + dt.timedelta(seconds=i) for i in ids],
                SCHEMA.field("ts").type,
            ),
            pa.array([None if i % 5 == 0 else i / 3 for i in ids]),
            pa.array(
                [None if i % 13 == 0 else [f"t{i % 3}"] * (i % 4) for i in ids],
                SCHEMA.field("tags").type,
            ),
            pa.array(
                [None if i % 17 == 0 else {"x": i % 100, "y": -(i % 50)} for i in ids],
                SCHEMA.field("point").type,
            ),
        ],
        schema=SCHEMA,
    )


def int_batches(n: int, rows: int, start: int = 0) -> list[pa.RecordBatch]:
    """``n`` batches of ``rows`` rows with a single int64 column ``v`` counting from ``start``."""
    return [
        pa.record_batch(
            {"v": pa.array(range(start + i * rows, start + (i + 1) * rows), pa.int64())}
        )
        for i in range(n)
    ]


def write_simple(loc: SegmentLocation, seq: int, partition: str = "p0", **kw: Any) -> SegmentMeta:
    """Publish segment ``seq`` with 20 batches of 500 int rows (values start at seq*10^6)."""
    return loc.write(
        partition,
        seq,
        int_batches(20, 500, start=seq * 1_000_000),
        min_ingestion_ns=seq,
        max_ingestion_ns=seq + 1,
        wal_ranges=[(seq * 10, seq * 10 + 9)],
        **kw,
    )


def seeded_offsets(size: int, n: int, seed: int) -> list[int]:
    return random.Random(seed).sample(range(size), min(n, size))


class RecordingIO(FileIO):
    """A FileIO that records ``(op, basename-or-dir)`` for every primitive operation."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        self.ops.append((op, path))

    def index(self, op: str, suffix: str, start: int = 0) -> int:
        """Position of the first ``op`` on a path ending with ``suffix`` at or after ``start``."""
        for i in range(start, len(self.ops)):
            if self.ops[i][0] == op and self.ops[i][1].endswith(suffix):
                return i
        raise AssertionError(f"no {op} on *{suffix} after {start} in {self.ops}")


class FsspecMemoryFS(MemoryFileSystem):
    """fsspec's in-memory filesystem under a scheme Quiver has no client of its own for
    (``fsspecmem://``), so a ``segment.path`` there goes through fsspec
    (:class:`~quiver_spark.segment.remote.RemoteBackend`) as ``hdfs://`` would:
    ``memory://`` is the engine's in-process object store wherever it appears."""

    protocol = "fsspecmem"
    store: dict[str, Any] = {}  # separate from the plain memory filesystem's store
    pseudo_dirs = [""]


fsspec.register_implementation(FsspecMemoryFS.protocol, FsspecMemoryFS, clobber=True)


class FlakyMemoryFS(MemoryFileSystem):
    """In-memory fsspec filesystem whose uploads fail on demand.

    ``plan`` maps a path suffix (``.arrow``, ``.meta.tmp``) to a list of modes consumed
    one per matching upload: ``"fail"`` raises before storing anything, ``"partial"``
    stores the first half of the bytes and then raises, ``"ok"`` uploads normally.
    """

    protocol = "flakymem"
    store: dict[str, Any] = {}  # separate from the plain memory filesystem's store
    pseudo_dirs = [""]
    plan: dict[str, list[str]] = {}

    def _mode(self, path: str) -> str:
        for suffix, modes in self.plan.items():
            if path.endswith(suffix) and modes:
                return modes.pop(0)
        return "ok"

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        how = self._mode(path)
        if how == "fail":
            raise ConnectionError(f"injected upload failure for {path}")
        if how == "partial":
            super().pipe_file(path, value[: len(value) // 2], mode=mode, **kwargs)
            raise ConnectionError(f"injected failure after a partial upload of {path}")
        super().pipe_file(path, value, mode=mode, **kwargs)

    def put_file(self, lpath: str, rpath: str, *args: Any, **kwargs: Any) -> None:
        how = self._mode(rpath)
        if how != "ok":
            raise ConnectionError(f"injected put failure for {rpath}")
        super().put_file(lpath, rpath, *args, **kwargs)
