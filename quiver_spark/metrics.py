"""A tiny in-process registry of labelled counters and gauges (no dependency).

Names follow the proposal (``quiver.gc.evictions_total{reason}``); the Prometheus
text exposition replaces dots with underscores. :meth:`Metrics.write_prometheus_textfile`
follows the node_exporter textfile-collector convention: write ``<path>.tmp``, fsync,
rename over ``<path>`` (which should end in ``.prom``), fsync the directory.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from .fs import DEFAULT_IO, FileIO

GC_EVICTIONS = "quiver.gc.evictions_total"  # {reason: steady|time|size}
INGEST_THROTTLE = "quiver.ingest.throttle_total"
SUBSCRIBER_DROPPED = "quiver.subscriber.dropped_segments_total"  # {subscriber}
SEGMENT_DROPPED = "quiver.segment.dropped_total"
CORE_BYTES = "quiver.core.bytes"  # {core_id}: WAL + segment bytes of one partition
CORE_CAP_FRACTION = "quiver.core.cap_fraction"  # {core_id}
STORE_BYTES = "quiver.store.bytes"
OPEN_SEGMENT_BYTES = "quiver.segment.open_bytes"  # {partition}
WAL_BYTES = "quiver.wal.bytes"  # {partition}
ACKLOG_DEPTH_RECORDS = "quiver.acklog.depth_records"
ACKLOG_DEPTH_BYTES = "quiver.acklog.depth_bytes"
GAP_SET_SIZE = "quiver.subscriber.gap_set_size"  # {subscriber, partition}
LAG_SEGMENTS = "quiver.subscriber.lag_segments"  # {subscriber}
LAG_BYTES = "quiver.subscriber.lag_bytes"  # {subscriber}
LAG_SECONDS = "quiver.subscriber.lag_seconds"  # {subscriber}
THROTTLED = "quiver.ingest.throttled"  # 1 while the size cap throttles intake

COUNTERS = {GC_EVICTIONS, INGEST_THROTTLE, SUBSCRIBER_DROPPED, SEGMENT_DROPPED}

Labels = tuple[tuple[str, str], ...]
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _key(labels: dict[str, Any]) -> Labels:
    for k in labels:
        if not _LABEL_RE.fullmatch(k):
            raise ValueError(f"invalid metric label name {k!r}")
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters (monotonic) and gauges (set), keyed by name + labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._gauges: dict[str, dict[Labels, float]] = {}

    def inc(self, name: str, value: float = 1, **labels: Any) -> None:
        """Add ``value`` (>= 0) to a counter."""
        if value < 0:
            raise ValueError(f"counter {name} cannot decrease (inc by {value})")
        with self._lock:
            series = self._counters.setdefault(name, {})
            key = _key(labels)
            series[key] = series.get(key, 0) + value

    def set(self, name: str, value: float, **labels: Any) -> None:
        """Set a gauge."""
        with self._lock:
            self._gauges.setdefault(name, {})[_key(labels)] = value

    def clear_gauge(self, name: str) -> None:
        """Forget every series of a gauge (before re-publishing a fresh set)."""
        with self._lock:
            self._gauges.pop(name, None)

    def get(self, name: str, **labels: Any) -> float:
        """Current value of one series (0 if never set)."""
        with self._lock:
            for table in (self._counters, self._gauges):
                if name in table:
                    return table[name].get(_key(labels), 0)
        return 0

    def total(self, name: str) -> float:
        """Sum of a metric over every label set."""
        with self._lock:
            table = self._counters.get(name) or self._gauges.get(name) or {}
            return sum(table.values())

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{name: {"type": ..., "series": [{"labels": {...}, "value": v}, ...]}}``."""
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for kind, table in (("counter", self._counters), ("gauge", self._gauges)):
                for name, series in sorted(table.items()):
                    out[name] = {
                        "type": kind,
                        "series": [
                            {"labels": dict(k), "value": v} for k, v in sorted(series.items())
                        ],
                    }
            return out

    def to_prometheus(self) -> str:
        """The text exposition format (version 0.0.4)."""
        lines: list[str] = []
        for name, entry in self.snapshot().items():
            prom = name.replace(".", "_")
            lines.append(f"# TYPE {prom} {entry['type']}")
            for s in entry["series"]:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s["labels"].items())
                value = s["value"]
                text = repr(float(value)) if not float(value).is_integer() else str(int(value))
                lines.append(f"{prom}{{{labels}}} {text}" if labels else f"{prom} {text}")
        return "\n".join(lines) + "\n"

    def write_prometheus_textfile(self, path: str, io: FileIO = DEFAULT_IO) -> None:
        """Atomically replace ``path`` with the exposition (temp, fsync, rename, fsync dir)."""
        io.atomic_write(path, self.to_prometheus().encode())
