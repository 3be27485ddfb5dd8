"""Skipping whole segments by their statistics (batch reads with pushed filters).

A :class:`Prune` is one comparison ``column op value(s)`` in the physical integer form
segment metadata keeps (ARCHITECTURE.md §5.3): a timestamp's int64 in its unit, date32
days, date64 ms, or the integer. :func:`keep` says whether a segment may hold a
matching row; filtering the rows themselves stays with the caller (Spark evaluates
every filter again), so pruning only ever saves reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .segment import SegmentMeta

INGESTION_TIME = "_quiver_ingestion_time"
"""The metadata column whose value is a segment's ``max_ingestion_ns`` (in µs)."""

OPS = ("eq", "in", "gt", "ge", "lt", "le")


def physical(value: Any, typ: pa.DataType | None) -> int | None:
    """A literal as the physical int segment metadata keeps for a column of ``typ``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if typ is None:
        return None
    try:
        if isinstance(value, dt.datetime) and pa.types.is_timestamp(typ):
            if value.tzinfo is None and typ.tz is not None:
                value = value.replace(tzinfo=dt.UTC)
            return pa.scalar(value, pa.timestamp(typ.unit, tz=typ.tz)).cast(pa.int64()).as_py()
        if isinstance(value, dt.date) and pa.types.is_date(typ):
            return (
                pa.scalar(value, typ)
                .cast(pa.int32() if pa.types.is_date32(typ) else pa.int64())
                .as_py()
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    return None


@dataclass(frozen=True)
class Prune:
    """One comparison usable against segment min/max: ``column op values``."""

    column: str
    op: str
    values: tuple[int, ...]

    def may_match(self, lo: int | None, hi: int | None) -> bool:
        if lo is None or hi is None:
            return True  # no statistics: keep
        v = self.values
        if self.op == "eq":
            return lo <= v[0] <= hi
        if self.op == "in":
            return any(lo <= x <= hi for x in v)
        if self.op == "gt":
            return hi > v[0]
        if self.op == "ge":
            return hi >= v[0]
        if self.op == "lt":
            return lo < v[0]
        return lo <= v[0]  # le


def prune_of(column: str, op: str, values: Sequence[Any], schema: pa.Schema | None) -> Prune | None:
    """A :class:`Prune` for ``column op values`` if the store's statistics can serve it.

    Any integer, timestamp or date column qualifies (a segment is only pruned by it
    when that column is its ``event_time_column``), and the ingestion-time column.
    """
    typ: pa.DataType | None = None
    if column == INGESTION_TIME:
        typ = pa.timestamp("ns", tz="UTC")
    elif schema is not None and (idx := schema.get_field_index(column)) >= 0:
        typ = schema.field(idx).type
        if not (pa.types.is_integer(typ) or pa.types.is_timestamp(typ) or pa.types.is_date(typ)):
            return None
    if typ is None or op not in OPS:
        return None
    vals = [physical(v, typ) for v in values]
    if not vals or any(v is None for v in vals):
        return None
    return Prune(column, op, tuple(v for v in vals if v is not None))


def keep(meta: SegmentMeta, prunes: Iterable[Prune]) -> bool:
    """False when no row of the segment can match every prune."""
    for pr in prunes:
        if pr.column == INGESTION_TIME:
            # every row's value is max_ingestion_ns truncated to microseconds
            ns = meta.max_ingestion_ns // 1000 * 1000
            if not pr.may_match(ns, ns):
                return False
        elif meta.event_time_column == pr.column and not pr.may_match(
            meta.min_event_time, meta.max_event_time
        ):
            return False
    return True
