"""Exactly-once audit of what each subscriber delivered, read without Spark.

A Parquet streaming sink records the files of each committed batch in
``<out>/_spark_metadata/<batchId>`` (JSON lines after a ``v1`` header; every
``compactInterval`` batches a ``<batchId>.compact`` file holds all entries so far).
Files a killed batch left behind are not in that log, and Spark readers ignore
them; so does this audit. A key delivered twice in the log is a real duplicate.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq


def committed_files(out: Path) -> list[Path]:
    """Parquet files of every committed batch of the sink writing to ``out``."""
    log_dir = out / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    batches: dict[int, Path] = {}
    compacts: dict[int, Path] = {}
    for p in log_dir.iterdir():
        stem, _, suffix = p.name.partition(".")
        if stem.isdigit() and suffix == "":
            batches[int(stem)] = p
        elif stem.isdigit() and suffix == "compact":
            compacts[int(stem)] = p
    start = max(compacts, default=-1)
    sources = ([compacts[start]] if start >= 0 else []) + [
        batches[b] for b in sorted(batches) if b > start
    ]
    files: dict[str, bool] = {}
    for src in sources:
        lines = src.read_text().splitlines()
        for line in lines[1:]:
            if not line.strip():
                continue
            entry = json.loads(line)
            files[entry["path"]] = entry.get("action", "add") == "add"
    return [Path(unquote(urlparse(p).path)) for p, added in files.items() if added]


def delivered(out: Path, columns: tuple[str, ...] = ("key",)) -> pa.Table:
    """Every row a subscriber's committed output holds (only ``columns``)."""
    tables = [pq.read_table(f, columns=list(columns)) for f in committed_files(out)]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.table({c: pa.array([], pa.int64()) for c in columns})
    return pa.concat_tables(tables)


def delivered_rows(out: Path) -> int:
    """Row count of the committed output, from Parquet footers only (cheap, for polling)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in committed_files(out))


@dataclass
class KeyAudit:
    """Per-key comparison of a subscriber's delivery against keys ``0 .. total-1``."""

    name: str
    produced: int
    delivered: int
    distinct: int
    duplicates: int
    """Deliveries beyond the first of a key."""
    losses: int
    """Produced keys never delivered."""
    unexpected: int
    """Delivered keys that were never produced."""
    corrupt: int = 0
    """Rows whose payload is not the one produced for their key."""
    duplicate_examples: list[int] = field(default_factory=list)
    lost_examples: list[int] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.losses or self.unexpected or self.corrupt)

    def line(self) -> str:
        return (
            f"{self.name}: produced {self.produced}, delivered {self.delivered}, "
            f"distinct {self.distinct}, duplicates {self.duplicates}, "
            f"losses {self.losses}, unexpected {self.unexpected}, corrupt {self.corrupt}"
        )


def audit_keys(
    name: str, keys: list[int], total: int, payloads: list[str] | None = None
) -> KeyAudit:
    """Compare delivered ``keys`` with ``0 .. total-1``; payloads must read ``payload-<key>``."""
    counts = Counter(keys)
    corrupt = (
        sum(p != f"payload-{k}" for k, p in zip(keys, payloads, strict=True)) if payloads else 0
    )
    dupes = sorted(k for k, n in counts.items() if n > 1)
    lost = [k for k in range(total) if k not in counts]
    unexpected = [k for k in counts if not 0 <= k < total]
    return KeyAudit(
        name=name,
        produced=total,
        delivered=len(keys),
        distinct=len(counts),
        duplicates=sum(n - 1 for n in counts.values()),
        losses=len(lost),
        unexpected=len(unexpected),
        corrupt=corrupt,
        duplicate_examples=dupes[:10],
        lost_examples=lost[:10],
    )
