"""Counters and gauges, exposed in the Prometheus text format through prometheus_client.

Every family is declared once in :data:`FAMILIES` with its type, help text, labels and
*scope*, which decides which file carries it, so that no series appears in two files
of a textfile collector's directory (ARCHITECTURE.md §20):

- ``process``: what one process did (evictions by its retention passes, throttled
  appends, a consumer's acknowledgements). Each process writes its own file
  ``<root>/metrics/<instance>.prom`` (``writer-<partition>``, ``consumer-<subscriber>``,
  ``gc``) and every series in it carries ``instance="<instance>"``; counters continue
  from the file's previous values when the process restarts.
- ``writer``: a live writer's own partition (WAL and open-segment bytes, throttle
  state, heartbeat time), labelled ``partition``, in that writer's file.
- ``store``: figures of the whole store (bytes per partition, subscriber lag, gap
  sets, ack-log depth, damaged segments, liveness), computed once, by
  ``quiver metrics PATH`` (:mod:`quiver_spark.cli.metrics`), never by a writer.

Names are written with dots in code (``quiver.gc.evictions_total``) and underscores
in the exposition.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from . import layout
from .errors import InvalidArgumentError, MetricsFormatError
from .fs import DEFAULT_IO, FileIO
from .objects import ObjectStore
from .objects.writes import put_advisory

log = logging.getLogger(__name__)

GC_EVICTIONS = "quiver.gc.evictions_total"  # {reason}
INGEST_THROTTLE = "quiver.ingest.throttle_total"
SUBSCRIBER_DROPPED = "quiver.subscriber.dropped_segments_total"  # {subscriber}
SEGMENT_DROPPED = "quiver.segment.dropped_total"
SOURCE_ACKED = "quiver.source.acked_segments_total"  # {subscriber}
SOURCE_DROPPED = "quiver.source.dropped_segments_total"  # {subscriber}
SOURCE_LOST = "quiver.source.lost_segments_total"  # {subscriber, reason}
SOURCE_HORIZON_DROPPED = "quiver.source.horizon_dropped_segments_total"  # {subscriber}
SOURCE_HORIZON_DROPPED_ROWS = "quiver.source.horizon_dropped_rows_total"  # {subscriber}
PARTITION_BYTES = "quiver.partition.bytes"  # {partition}: WAL + segment bytes
PARTITION_CAP_FRACTION = "quiver.partition.cap_fraction"  # {partition}
PARTITION_SEGMENTS = "quiver.partition.segments"  # {partition}
PARTITION_WRITER_LIVE = "quiver.partition.writer_live"  # {partition}
STORE_BYTES = "quiver.store.bytes"
STORE_SIZE_CAP = "quiver.store.size_cap_bytes"
OPEN_SEGMENT_BYTES = "quiver.segment.open_bytes"  # {partition}
WAL_BYTES = "quiver.wal.bytes"  # {partition}
SEGMENT_DAMAGED = "quiver.segment.damaged"  # {partition}
ACKLOG_DEPTH_RECORDS = "quiver.acklog.depth_records"
ACKLOG_DEPTH_BYTES = "quiver.acklog.depth_bytes"
GAP_SET_SIZE = "quiver.subscriber.gap_set_size"  # {subscriber, partition}
LAG_SEGMENTS = "quiver.subscriber.lag_segments"  # {subscriber}
LAG_BYTES = "quiver.subscriber.lag_bytes"  # {subscriber}
LAG_SECONDS = "quiver.subscriber.lag_seconds"  # {subscriber}
HEAD_LAG_SEGMENTS = "quiver.subscriber.head_lag_segments"  # {subscriber}
HEAD_LAG_SECONDS = "quiver.subscriber.head_lag_seconds"  # {subscriber}
HEAD_LAG_ROWS = "quiver.subscriber.head_lag_rows"  # {subscriber}
BACKLOG_SEGMENTS = "quiver.subscriber.backlog_segments"  # {subscriber}
BACKLOG_BYTES = "quiver.subscriber.backlog_bytes"  # {subscriber}
BACKLOG_ROWS = "quiver.subscriber.backlog_rows"  # {subscriber}
BACKLOG_SECONDS = "quiver.subscriber.backlog_seconds"  # {subscriber}
SUBSCRIBER_LIVE = "quiver.subscriber.live"  # {subscriber}
SUBSCRIBER_LAST_ACK = "quiver.subscriber.last_ack_timestamp_seconds"  # {subscriber}
THROTTLED = "quiver.ingest.throttled"  # {partition}: 1 while the size cap throttles intake
WRITER_HEARTBEAT = "quiver.writer.heartbeat_timestamp_seconds"  # {partition}

PROCESS, WRITER, STORE = "process", "writer", "store"


@dataclass(frozen=True)
class Family:
    kind: str  # "counter" | "gauge"
    help: str
    labels: tuple[str, ...]
    scope: str


FAMILIES: dict[str, Family] = {
    GC_EVICTIONS: Family(
        "counter", "Segments deleted by this process's retention passes, by the layer that "
        "needed them (steady, time, size, drop)", ("reason",), PROCESS),
    INGEST_THROTTLE: Family(
        "counter", "Appends that waited for space under the size cap", (), PROCESS),
    SUBSCRIBER_DROPPED: Family(
        "counter", "Segments recorded dropped for a subscriber before it acknowledged them",
        ("subscriber",), PROCESS),
    SEGMENT_DROPPED: Family(
        "counter", "Segments deleted before every subscriber acknowledged them", (), PROCESS),
    SOURCE_ACKED: Family(
        "counter", "Segments a consumer acknowledged", ("subscriber",), PROCESS),
    SOURCE_DROPPED: Family(
        "counter", "Planned segments a consumer skipped because retention had dropped them",
        ("subscriber",), PROCESS),
    SOURCE_LOST: Family(
        "counter", "Planned segments a consumer found lost (quarantined, missing, corrupt)",
        ("subscriber", "reason"), PROCESS),
    SOURCE_HORIZON_DROPPED: Family(
        "counter", "Planned segments a consumer recorded dropped, not delivered, because their "
        "newest row was older than its acceptance horizon", ("subscriber",), PROCESS),
    SOURCE_HORIZON_DROPPED_ROWS: Family(
        "counter", "Rows of the segments a consumer dropped past its acceptance horizon",
        ("subscriber",), PROCESS),
    WAL_BYTES: Family("gauge", "WAL bytes of the writer's partition", ("partition",), WRITER),
    OPEN_SEGMENT_BYTES: Family(
        "gauge", "Bytes in the writer's open (unsealed) segment", ("partition",), WRITER),
    THROTTLED: Family(
        "gauge", "1 while the size cap throttles this writer's appends", ("partition",), WRITER),
    WRITER_HEARTBEAT: Family(
        "gauge", "Unix time of the writer's last metrics update; a stale value means the "
        "writer is gone (quiver metrics --prune-stale removes its file)", ("partition",), WRITER),
    PARTITION_BYTES: Family(
        "gauge", "WAL + segment bytes of a partition", ("partition",), STORE),
    PARTITION_CAP_FRACTION: Family(
        "gauge", "A partition's bytes over its fair share of the size cap", ("partition",), STORE),
    PARTITION_SEGMENTS: Family("gauge", "Published segments of a partition", ("partition",), STORE),
    PARTITION_WRITER_LIVE: Family(
        "gauge", "1 when a writer holds the partition (its lock; its lease on an object root)",
        ("partition",), STORE),
    STORE_BYTES: Family("gauge", "WAL + segment bytes of the whole store", (), STORE),
    STORE_SIZE_CAP: Family("gauge", "The store's size cap (0: none)", (), STORE),
    SEGMENT_DAMAGED: Family(
        "gauge", "Segments whose .meta fails verification (kept for quiver fsck --quarantine)",
        ("partition",), STORE),
    ACKLOG_DEPTH_RECORDS: Family(
        "gauge", "Ack-log records since the last checkpoint (replay cost)", (), STORE),
    ACKLOG_DEPTH_BYTES: Family("gauge", "Ack-log bytes since the last checkpoint", (), STORE),
    GAP_SET_SIZE: Family(
        "gauge", "Segments acknowledged above a subscriber's high-water mark",
        ("subscriber", "partition"), STORE),
    LAG_SEGMENTS: Family(
        "gauge", "Published segments a subscriber has not acknowledged", ("subscriber",), STORE),
    LAG_BYTES: Family(
        "gauge", "Bytes of the segments a subscriber has not acknowledged", ("subscriber",),
        STORE),
    LAG_SECONDS: Family(
        "gauge", "Age of the oldest segment a subscriber has not acknowledged",
        ("subscriber",), STORE),
    HEAD_LAG_SEGMENTS: Family(
        "gauge", "Published segments above the highest seq a subscriber acknowledged (new "
        "data not served yet)", ("subscriber",), STORE),
    HEAD_LAG_SECONDS: Family(
        "gauge", "Age of the oldest segment above the highest seq a subscriber acknowledged",
        ("subscriber",), STORE),
    HEAD_LAG_ROWS: Family(
        "gauge", "Rows of the segments above the highest seq a subscriber acknowledged",
        ("subscriber",), STORE),
    BACKLOG_SEGMENTS: Family(
        "gauge", "Segments below the highest seq a subscriber acknowledged that it has not "
        "acknowledged yet (newest first: the backfill's work; oldest first: nacked ones)",
        ("subscriber",), STORE),
    BACKLOG_BYTES: Family(
        "gauge", "Bytes of a subscriber's backlog segments", ("subscriber",), STORE),
    BACKLOG_ROWS: Family(
        "gauge", "Rows of a subscriber's backlog segments", ("subscriber",), STORE),
    BACKLOG_SECONDS: Family(
        "gauge", "Age of the oldest segment of a subscriber's backlog (0: no backlog)",
        ("subscriber",), STORE),
    SUBSCRIBER_LIVE: Family(
        "gauge", "1 while a query or consumer holds the subscriber", ("subscriber",), STORE),
    SUBSCRIBER_LAST_ACK: Family(
        "gauge", "Unix time of the subscriber's last acknowledgement (0: never)",
        ("subscriber",), STORE),
}  # fmt: skip

COUNTERS = {n for n, f in FAMILIES.items() if f.kind == "counter"}

Labels = tuple[tuple[str, str], ...]


def prom_name(name: str) -> str:
    return name.replace(".", "_")


def _key(labels: dict[str, Any]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


labels_key = _key
"""The series key of a label set (``labels_key({"subscriber": "a"})``)."""


class Metrics:
    """Thread-safe counters (monotonic) and gauges (set), keyed by name + labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._gauges: dict[str, dict[Labels, float]] = {}

    def inc(self, name: str, value: float = 1, **labels: Any) -> None:
        """Add ``value`` (>= 0) to a counter."""
        if value < 0:
            raise InvalidArgumentError(
                f"increment of counter {name}",
                value,
                ">= 0",
                f"counter {name} cannot decrease (inc by {value})",
            )
        with self._lock:
            series = self._counters.setdefault(name, {})
            key = _key(labels)
            series[key] = series.get(key, 0) + value

    def set(self, name: str, value: float, **labels: Any) -> None:
        """Set a gauge."""
        with self._lock:
            self._gauges.setdefault(name, {})[_key(labels)] = value

    def replace_gauge(self, name: str, series: dict[Labels, float]) -> None:
        """Make ``series`` (label tuples as :func:`labels_key` builds them) the whole
        gauge, in one step."""
        with self._lock:
            self._gauges[name] = series

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

    # -- exposition ------------------------------------------------------------------------
    def families(
        self, scopes: Iterable[str], instance: str | None = None, partition: str | None = None
    ) -> Iterator[Metric]:
        """The declared families of ``scopes`` with their current series; ``process``
        families get ``instance`` as a label; ``writer`` families keep only the series
        of ``partition`` when it is given. Undeclared names are never exported."""
        wanted = set(scopes)
        snap = self.snapshot()
        for name, fam in FAMILIES.items():
            if fam.scope not in wanted:
                continue
            extra = ("instance",) if fam.scope == PROCESS and instance is not None else ()
            labels = [*extra, *fam.labels]
            cls = CounterMetricFamily if fam.kind == "counter" else GaugeMetricFamily
            base = prom_name(name)
            if fam.kind == "counter":
                base = base.removesuffix("_total")
            out = cls(base, fam.help, labels=labels)
            for s in snap.get(name, {}).get("series", []):
                if fam.scope == WRITER and partition is not None:
                    if s["labels"].get("partition") != partition:
                        continue
                values: list[str] = [instance] if instance is not None and extra else []
                values += [str(s["labels"].get(label, "")) for label in fam.labels]
                out.add_metric(values, s["value"])
            yield out

    def to_prometheus(self, scopes: Iterable[str] = (PROCESS, WRITER, STORE),
                      instance: str | None = None, partition: str | None = None) -> str:  # fmt: skip
        """The text exposition (HELP and TYPE on every family) through prometheus_client."""
        registry = CollectorRegistry(auto_describe=False)
        chosen = list(scopes)

        class _Collector:
            def collect(inner) -> Iterator[Metric]:
                yield from self.families(chosen, instance, partition)

        registry.register(_Collector())
        return generate_latest(registry).decode()

    def write_prometheus_textfile(
        self,
        path: str,
        io: FileIO = DEFAULT_IO,
        *,
        scopes: Iterable[str] = (PROCESS, WRITER, STORE),
        instance: str | None = None,
        partition: str | None = None,
    ) -> None:
        """Atomically replace ``path`` with the exposition (temp + rename, the
        node_exporter textfile-collector convention). Advisory: not fsynced, so a
        consumer's acknowledgement or a writer's finalize never waits on it."""
        io.write_advisory(path, self.to_prometheus(scopes, instance, partition).encode())

    def write_prometheus_object(
        self,
        objects: ObjectStore,
        key: str,
        *,
        scopes: Iterable[str] = (PROCESS, WRITER, STORE),
        instance: str | None = None,
        partition: str | None = None,
    ) -> None:
        """Write the exposition whole to the advisory object ``key`` of a store's root
        (:func:`~quiver_spark.objects.writes.put_advisory`: on a POSIX root temp +
        rename without fsync, elsewhere an unconditional put)."""
        data = self.to_prometheus(scopes, instance, partition).encode()
        put_advisory(objects, key, data)

    def restore_counters(self, path: str) -> int:
        """Continue this process's counters from a previous exposition at ``path`` (a
        restarted writer or consumer), so they stay monotonic; returns series restored.

        The file is advisory: one that cannot be read back (damaged bytes, not the text
        format) is logged and the counters start from zero; it never fails the caller.
        """

        def read() -> list[Metric] | None:
            try:
                return read_exposition(path)
            except FileNotFoundError:
                return None

        return self._restore_read(path, read)

    def restore_counters_from(self, objects: ObjectStore, key: str) -> int:
        """:meth:`restore_counters` from the object ``key`` of a store's root."""

        def read() -> list[Metric] | None:
            got = objects.get(key)
            return None if got is None else parse_exposition(got.data)

        return self._restore_read(objects.display(key), read)

    def _restore_read(self, shown: str, read: Callable[[], list[Metric] | None]) -> int:
        """Restore what ``read()`` returns (None: there is none); a read that fails is
        logged and the counters start from zero."""
        try:
            families = read()
        except IsADirectoryError:
            return 0
        except (OSError, ValueError) as e:
            log.warning(
                "quiver.metrics.unreadable path=%s error=%s; counters restart at 0", shown, e
            )
            return 0
        return 0 if families is None else self._restore(families)

    def _restore(self, families: list[Metric]) -> int:
        by_prom = {prom_name(n).removesuffix("_total"): n for n in COUNTERS}
        restored = 0
        for fam in families:
            name = by_prom.get(fam.name.removesuffix("_total"))
            if name is None:
                continue
            for sample in fam.samples:
                if not sample.name.endswith("_total") or not sample.value >= 0:
                    continue  # a NaN or negative count is damage too: not restored
                labels = {k: v for k, v in sample.labels.items() if k != "instance"}
                self.inc(name, sample.value, **labels)
                restored += 1
        return restored


def read_exposition(path: str) -> list[Metric]:
    """The metric families of a Prometheus text file; ValueError, one line, when it is
    not UTF-8 text in that format (a damaged advisory file)."""
    with open(path, "rb") as f:
        raw = f.read()
    return parse_exposition(raw)


def parse_exposition(raw: bytes) -> list[Metric]:
    """The metric families of Prometheus text; ValueError, one line, when it is not
    UTF-8 text in that format."""
    try:
        return list(text_string_to_metric_families(raw.decode("utf-8")))
    except UnicodeDecodeError as e:
        raise MetricsFormatError(
            f"not UTF-8 at byte {e.start}: not a Prometheus text file", e.start
        ) from e
    except Exception as e:  # the parser raises ValueError, or worse on odd input
        raise MetricsFormatError(f"not the Prometheus text format: {type(e).__name__}: {e}") from e


def metrics_dir(root: str) -> str:
    return os.path.join(root, layout.metrics_dir())


def metrics_key(instance: str) -> str:
    """The object a process's exposition is written to (``metrics/<instance>.prom``)."""
    return layout.metrics_file(instance)
