"""Shared helpers for subscriber and retention tests: an in-memory segment catalog."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from quiver_spark.subscribers import SubscriberRegistry

HOUR_NS = 3_600_000_000_000


@dataclass(frozen=True)
class Seg:
    partition: str
    seq: int
    size_bytes: int
    min_ingestion_ns: int
    max_ingestion_ns: int
    rows: int = 0


class MemCatalog:
    """In-memory ``SegmentCatalog``: ``add`` finalizes, ``delete`` removes (logged)."""

    def __init__(self) -> None:
        self.segs: dict[str, dict[int, Seg]] = {}
        self.next_seq: dict[str, int] = {}
        self.deleted: list[tuple[str, int]] = []

    def add(self, partition: str, size: int = 100, ingestion_ns: int = 0) -> int:
        seq = self.next_seq.get(partition, 1)
        self.next_seq[partition] = seq + 1
        self.segs.setdefault(partition, {})[seq] = Seg(
            partition, seq, size, ingestion_ns, ingestion_ns
        )
        return seq

    def partitions(self) -> list[str]:
        return sorted(self.segs)

    def list(self, partition: str) -> list[Seg]:
        return [self.segs[partition][s] for s in sorted(self.segs.get(partition, {}))]

    def delete(self, partition: str, seqs: Iterable[int]) -> None:
        for s in seqs:
            if self.segs.get(partition, {}).pop(s, None) is not None:
                self.deleted.append((partition, s))

    def retained(self) -> dict[str, list[int]]:
        return {p: sorted(v) for p, v in self.segs.items()}

    def known(self, partition: str, seq: int) -> bool:
        return 1 <= seq < self.next_seq.get(partition, 1)

    def total(self) -> int:
        return sum(s.size_bytes for v in self.segs.values() for s in v.values())


def reopen_digest(root: str, **kw: object) -> dict:
    reg = SubscriberRegistry.open(root, **kw)  # type: ignore[arg-type]
    try:
        return reg.state.digest()
    finally:
        reg.close()


def copy_store(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def log_files(root: str) -> list[str]:
    d = os.path.join(root, "subscribers")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log"))


class DirCatalog:
    """A ``SegmentCatalog`` on disk (empty files named ``<seq>_<size>_<ns>.seg``).

    Deletions go through ``io.durable_unlink`` so crash simulations see them.
    """

    def __init__(self, root: str, io: object | None = None) -> None:
        from quiver_spark.fs import DEFAULT_IO

        self.dir = os.path.join(root, "segments")
        self.io = io or DEFAULT_IO

    def add(self, partition: str, seq: int, size: int = 100, ingestion_ns: int = 0) -> None:
        d = os.path.join(self.dir, partition)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{seq:020d}_{size}_{ingestion_ns}.seg"), "wb"):
            pass

    def partitions(self) -> list[str]:
        return sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []

    def _files(self, partition: str) -> dict[int, str]:
        d = os.path.join(self.dir, partition)
        names = os.listdir(d) if os.path.isdir(d) else []
        return {int(n.split("_")[0]): os.path.join(d, n) for n in names if n.endswith(".seg")}

    def list(self, partition: str) -> list[Seg]:
        out = []
        for seq, path in sorted(self._files(partition).items()):
            _, size, ns = os.path.basename(path)[:-4].split("_")
            out.append(Seg(partition, seq, int(size), int(ns), int(ns)))
        return out

    def delete(self, partition: str, seqs: Iterable[int]) -> None:
        files = self._files(partition)
        self.io.durable_unlink([files[s] for s in seqs if s in files])  # type: ignore[attr-defined]

    def retained(self) -> dict[str, list[int]]:
        return {p: [s.seq for s in self.list(p)] for p in self.partitions()}
