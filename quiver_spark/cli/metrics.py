"""``quiver metrics PATH``: the store-wide Prometheus series, computed once.

Writers and consumers each keep their own ``metrics/<instance>.prom`` in the root (a
file, or an object on an object root: what that process did, every series labelled
``instance``; ARCHITECTURE.md §20). The figures
of the whole store (bytes per partition, subscriber lag and liveness, gap sets,
ack-log depth, damaged segments, the size cap) come from this command alone, so a
textfile collector pointed at a directory never sees a series twice:

    quiver metrics /data/quiver --textfile /var/lib/node_exporter/quiver.prom   # cron
    quiver metrics /data/quiver --all     # this plus every process file, on stdout
    quiver metrics s3://bucket/store --serve 0.0.0.0:9464 --all   # scraped by Prometheus

``--serve [HOST:]PORT`` keeps one read handle open and answers ``GET /metrics`` (and
``/``) with the same exposition, computed again at most every ``--interval`` (15 s:
each computation reads the store, on an object root a few requests per partition), so
any number of scrapers cost the store one computation per interval. It runs until
Ctrl-C (exit 130); a computation that fails answers 503 naming why, and the next
scrape tries again.

A process file that cannot be read back (damaged bytes; the files are advisory) is
named on stderr (``warning: metrics file ... skipped``) and left out; the rest is
printed and the exit code stays 0.

``--prune-stale`` removes the files of writers whose partition no process holds (a
replaced executor's slot) before reading; their counters restart from zero if that
slot is written again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from .. import layout
from .. import metrics as m
from ..config import NAME_RE
from ..errors import CliError, ConfigError, QuiverError
from ..gauges import observe
from ..retained import RetainedIndex
from ..store import QuiverStore
from ..values import parse_duration
from .common import StoreArgs, emit_json, open_store, store_arguments, with_store, writer_holder
from .exits import EXIT_TROUBLE, EXIT_USAGE
from .registry import open_registry
from .status import collect_status


def store_metrics(store: QuiverStore, now_ns: int | None = None) -> m.Metrics:
    """A :class:`~quiver_spark.metrics.Metrics` holding the store-scope families."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    doc = collect_status(store, now_ns)
    out = m.Metrics()
    cap = doc["totals"]["size_cap_bytes"] or 0
    parts = doc["partitions"]
    for p in parts:
        pid = p["partition"]
        total = p["segment_bytes"] + p["wal_bytes"]
        out.set(m.PARTITION_BYTES, total, partition=pid)
        out.set(m.PARTITION_SEGMENTS, p["segments"], partition=pid)
        out.set(m.PARTITION_WRITER_LIVE, 1 if p["writer_live"] else 0, partition=pid)
        if cap:
            out.set(m.PARTITION_CAP_FRACTION, total / (cap / max(len(parts), 1)), partition=pid)
    for d in store.run_retention(now_ns, dry_run=True).damaged:
        out.set(m.SEGMENT_DAMAGED, out.get(m.SEGMENT_DAMAGED, partition=d.partition) + 1,
                partition=d.partition)  # fmt: skip
    out.set(m.STORE_BYTES, doc["totals"]["bytes"])
    out.set(m.STORE_SIZE_CAP, cap)
    registry = open_registry(store)
    if registry is not None:
        try:
            index = RetainedIndex()
            index.sync(store.segment_location, None, full=True)
            observe(out, registry, index, now_ns)
        finally:
            registry.close()
    for s in doc["subscribers"]:
        # bytes as quiver status counts them: a segment is its .arrow plus its .meta
        out.set(m.LAG_BYTES, s["lag_bytes"], subscriber=s["name"])
        out.set(m.SUBSCRIBER_LIVE, 1 if s["live"] else 0, subscriber=s["name"])
        out.set(m.SUBSCRIBER_LAST_ACK, (s["last_ack_ns"] or 0) / 1e9, subscriber=s["name"])
    return out


def prune_stale(store: QuiverStore) -> list[str]:
    """Remove ``writer-<partition>.prom`` objects of partitions no writer holds."""
    removed = []
    for info in store.objects.list(layout.metrics_prefix()):
        name = info.key.rsplit("/", 1)[-1]
        pid = layout.parse_writer_metrics_file(name)
        if pid is None:
            continue
        if NAME_RE.fullmatch(pid) and writer_holder(store, pid) is None:
            store.objects.delete(info.key)
            removed.append(name)
    return removed


def as_document(text: str) -> dict[str, object]:
    """The exposition as JSON: ``{"schema": "quiver.metrics/1", "families": [{"name",
    "type", "help", "samples": [{"name", "labels", "value"}]}]}``."""
    return {
        "schema": "quiver.metrics/1",
        "families": [
            {
                "name": fam.name,
                "type": fam.type,
                "help": fam.documentation,
                "samples": [
                    {"name": s.name, "labels": dict(s.labels), "value": s.value}
                    for s in fam.samples
                ],
            }
            for fam in text_string_to_metric_families(text)
        ],
    }


def merged_exposition(texts: list[str], more: Sequence[list[Metric]] = ()) -> str:
    """One exposition of several (texts, and families already parsed): families with
    the same name are joined (their series differ by ``instance``), so HELP and TYPE
    appear once each."""
    families: dict[str, Metric] = {}
    parsed = [list(text_string_to_metric_families(t)) for t in texts] + list(more)
    for fams in parsed:
        for fam in fams:
            have = families.get(fam.name)
            if have is None:
                families[fam.name] = fam
            else:
                have.samples.extend(fam.samples)
    registry = CollectorRegistry(auto_describe=False)

    class _Merged:
        def collect(self) -> list[Metric]:
            return list(families.values())

    registry.register(_Merged())
    return generate_latest(registry).decode()


def process_files(store: QuiverStore) -> list[list[Metric]]:
    """The families of every readable ``metrics/*.prom`` of the root; a damaged one is
    named on stderr and skipped (advisory files never fail the command)."""
    out = []
    for info in store.objects.list(layout.metrics_prefix()):
        if not layout.is_metrics_file(info.key):
            continue
        shown = store.objects.display(info.key)
        try:
            got = store.objects.get(info.key)
            if got is None:
                continue  # removed by --prune-stale or its process meanwhile
            out.append(m.parse_exposition(got.data))
        except (OSError, ValueError) as e:
            click.echo(f"warning: metrics file {shown} is damaged ({e}); skipped", err=True)
    return out


@click.command("metrics")
@store_arguments
@click.option("--textfile", metavar="FILE", help="Write atomically to FILE instead of stdout.")
@click.option(
    "--all",
    "include_all",
    is_flag=True,
    help="Merge in every process file of <PATH>/metrics (writers, consumers, gc).",
)
@click.option(
    "--prune-stale",
    "prune",
    is_flag=True,
    help="First remove the files of writers whose partition no process holds.",
)
@click.option(
    "--serve",
    metavar="[HOST:]PORT",
    help="Serve the series at http://HOST:PORT/metrics for Prometheus to scrape, until "
    "Ctrl-C (HOST defaults to 127.0.0.1; 0.0.0.0 listens on every interface).",
)
@click.option(
    "--interval",
    default="15s",
    show_default=True,
    metavar="DURATION",
    help="With --serve: compute the series again at most this often.",
)
def metrics(
    args: StoreArgs,
    textfile: str | None,
    include_all: bool,
    prune: bool,
    serve: str | None,
    interval: str,
) -> None:
    """Print the store-wide metrics in the Prometheus text format."""

    def run(store: QuiverStore) -> str:
        if prune:
            for name in prune_stale(store):
                click.echo(f"removed stale {name}", err=True)
        texts = [store_metrics(store).to_prometheus(scopes=(m.STORE,))]
        return merged_exposition(texts, process_files(store) if include_all else [])

    if serve is not None:
        if textfile or args.as_json:
            raise CliError(
                "--serve answers scrapes: it takes neither --textfile nor --json", EXIT_USAGE
            )
        host, port = serve_address(serve)
        try:
            every = parse_duration("--interval", interval)
        except ConfigError as e:
            raise CliError(str(e), EXIT_USAGE) from e
        store = open_store(args)
        try:
            serve_metrics(host, port, Exposition(lambda: run(store), every))
        finally:
            store.close()
        return
    text = with_store(args, run)
    if args.as_json:  # the same series as a document: {"schema", "families": [...]}
        emit_json(as_document(text))
        return
    if textfile:  # outside the store: the textfile collector's own temp-and-rename
        tmp = layout.tmp(textfile)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, textfile)
    else:
        click.echo(text, nl=False)


def serve_address(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as ``(host, port)``; CliError (exit 2) naming what is allowed."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(
            f"--serve {value!r}: expected [HOST:]PORT with PORT a number from 0 to 65535 "
            "(e.g. 9464 or 0.0.0.0:9464)",
            EXIT_USAGE,
        )
    return host, int(port)


class Exposition:
    """The exposition text, computed by ``compute`` at most every ``interval_s``
    seconds however many scrapes ask (one computation at a time)."""

    def __init__(self, compute: Callable[[], str], interval_s: float) -> None:
        self.compute = compute
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._text: str | None = None
        self._at = float("-inf")

    def get(self) -> str:
        with self._lock:
            if self._text is None or time.monotonic() - self._at >= self.interval_s:
                self._text = None  # a failed computation is never served as current
                self._text = self.compute()
                self._at = time.monotonic()
            return self._text


def serve_metrics(host: str, port: int, exposition: Exposition) -> None:
    """Answer ``GET /metrics`` (and ``/``) from ``exposition`` until Ctrl-C."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self._answer(404, "not found: Quiver's series are at /metrics\n")
                return
            try:
                body = exposition.get()
            except (QuiverError, OSError) as e:
                self._answer(503, f"quiver metrics: the store could not be read: {e}\n")
                return
            self._answer(200, body, "text/plain; version=0.0.4; charset=utf-8")

        def _answer(self, code: int, text: str, kind: str = "text/plain; charset=utf-8") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return None  # a scrape every few seconds is not news

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise CliError(
            f"--serve {host}:{port}: cannot listen there ({e.strerror or e})", EXIT_TROUBLE
        ) from e
    server.daemon_threads = True
    bound = server.server_address[1]
    click.echo(
        f"serving the store's metrics at http://{host}:{bound}/metrics (Ctrl-C stops)", err=True
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
