"""``quiver status PATH``: partitions, subscribers and totals of a store, read-only.

JSON schema (``--json``; ``"schema": "quiver.status/1"``; times are ns since the
epoch, ages and lags seconds, sizes bytes; ``null`` when unknown)::

    {
      "schema": "quiver.status/1", "path": str, "segments_url": str, "wal_root": str,
      "now_ns": int,
      "filters": {"partition": [glob], "subscriber": [glob]},  # [] when not filtered
      "partitions": [{
        "partition": str,
        "segments": int,              # published segments (damaged ones included)
        "segment_bytes": int,         # their .arrow plus .meta files on disk
        "rows": int,                  # rows of the readable ones
        "first_seq": int|null, "last_seq": int|null,
        "wal_files": int, "wal_bytes": int,   # the partition's WAL files on disk
        "bytes": int,                 # segment_bytes + wal_bytes
        "writer_live": bool,          # a process holds the partition (lock, or lease) now
                                      # (object root: its writer LEASE, on any machine)
        "stale": bool,                # heartbeat figures are from a writer that is gone
        "writer_pid": int|null,       # the live writer (the LEASE holder), else the
                                      # last one (a process that only sealed is not one)
        "writer_host": str|null,      # object root: the LEASE holder's host
        "heartbeat_ns": int|null,     # the writer's heartbeat (this machine's disk)
        "open_segment_bytes": int|null, "open_segment_rows": int|null,
        "open_segment_age_s": float|null,   # since the open segment began, also when
                                            # its writer died (how long its rows wait)
        "last_write_ns": int|null, "last_write_age_s": float|null,
        "pending_txns": int|null,
        "error": str|null             # a corrupt file met while listing (run fsck)
      }],
      "subscribers": [{
        "name": str,
        "lag_segments": int, "lag_bytes": int, "lag_seconds": float|null,  # over its rows
        "registered_ns": int|null, "last_ack_ns": int|null,   # from its record (§13.8)
        "live": bool,                  # a query or consumer holds it now
        "idle_seconds": float|null,    # since the last ack (or registration)
        "pinning_idle": bool,          # not live, idle >= 1h, and holding unread bytes
        "backlog_segments": int, "backlog_bytes": int,   # below its newest ack (newest first)
        "backlog_seconds": float|null, "backlog_rows": int, "head_lag_segments": int,
        "head_lag_seconds": float|null, "head_lag_rows": int,
        "horizon_dropped_segments": int,   # recorded dropped past its consumers'
        "horizon_dropped_rows": int,       # acceptance horizon (its record, §19)
        "partitions": [{"partition": str, "hwm": int, "gaps": int,
                        "lag_segments": int, "lag_bytes": int,
                        "lag_seconds": float|null,
                        "head_lag_segments": int, "head_lag_seconds": float|null,
                        "head_lag_rows": int, "backlog_segments": int,
                        "backlog_bytes": int, "backlog_rows": int}]
      }],
      "unregistered_records": [str],   # a record but no registration in the ack log
                                       # (§13.8): their data is kept until add/remove
      "totals": {"partitions": int, "segments": int, "segment_bytes": int,
                 "wal_bytes": int, "bytes": int,      # sums over the rows of "partitions"
                 "store_bytes": int,   # segment and WAL bytes of the whole store (all
                                       # partitions, also when --partition filters)
                 "size_cap_bytes": int|null,
                 "size_cap_used": float|null,         # store_bytes / size_cap_bytes
                 "size_cap_policy": str,
                 "subscribers": int},                 # rows of "subscribers"
      "policy": {"generation": int, option: str,   # the store's recorded policy (§7.2)
                 "damaged": str|null}   # why POLICY cannot be read (conservative then)
    }

Every byte figure counts files on disk the same way: a segment is its ``.arrow``
plus its ``.meta``, a WAL is its files. So a partition's ``bytes`` is
``segment_bytes + wal_bytes``, each total is the sum of the partition rows shown,
and a subscriber's ``lag_bytes`` is the sum of its partition rows.

Lag of a subscriber in a partition counts the published, readable segments it has
not acknowledged (``dropped`` counts as acknowledged) and their bytes;
``lag_seconds`` is now minus the oldest ingestion time among them (0 when nothing
is behind). A subscriber reading newest first (ARCHITECTURE.md §19) splits its lag in
two: the *head lag* (``head_lag_*``), the segments above the highest seq it
acknowledged, and the *backlog* (``backlog_*``), the segments below it it has not
acknowledged yet; each shows its segments, rows (``head_lag_rows``,
``backlog_rows``: the rows the segments' metadata records) and oldest age; oldest
first, every lag is head lag (``backlog_segments`` 0 but for nacked seqs).

``--partition GLOB`` and ``--subscriber GLOB`` (each repeatable, shell-style
patterns) narrow the partitions and subscribers listed, and each subscriber's
partition rows; a pattern that matches nothing is a usage error naming what exists.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from .. import layout
from ..control.manifest import ManifestEntry
from ..errors import CliError, CorruptionError
from ..gauges import LagSplit, age_s, lag_split, subscriber_lag
from ..policy import POLICY_OPTIONS
from ..retained import RetainedIndex
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..subscribers import SubscriberRegistry, records
from ..wal import list_wal_files
from .common import (
    StoreArgs,
    emit_json,
    human_bytes,
    human_seconds,
    human_time,
    render_table,
    store_arguments,
    wal_partitions,
    with_store,
)
from .exits import EXIT_TROUBLE
from .registry import open_registry

SCHEMA = "quiver.status/1"

F = TypeVar("F", bound=Callable[..., Any])


def wal_usage(store: QuiverStore, pid: str) -> tuple[int, int]:
    """``(files, bytes)`` of a partition's WAL, from the directory (not the heartbeat)."""
    files = 0
    total = 0
    for info in list_wal_files(os.path.join(store.wal_root, layout.wal_dir(pid)), store.io):
        files += 1
        total += info.size
    return files, total


def partition_ids(store: QuiverStore) -> list[str]:
    """Partitions with segments or a WAL directory, sorted."""
    return sorted(set(store.partitions()) | set(wal_partitions(store)))


def collect_status(
    store: QuiverStore,
    now_ns: int | None = None,
    *,
    partitions: Sequence[str] = (),
    subscribers: Sequence[str] = (),
) -> dict[str, Any]:
    """Everything ``quiver status`` shows, as the JSON document described above.

    ``partitions`` and ``subscribers`` are glob patterns (empty: everything); a
    pattern matching nothing raises :class:`CliError`.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    beats = store.heartbeats()
    all_pids = partition_ids(store)
    pids = select("partition", partitions, all_pids)
    metas: dict[str, list[ManifestEntry]] = {}
    sizes: dict[str, dict[int, int]] = {}
    rows: list[dict[str, Any]] = []
    store_bytes = 0
    seg_parts = set(store.partitions())
    for pid in all_pids:
        error = None
        try:  # its MANIFEST (one read) and a probe past it; a listing if it has none
            view = store.segment_location.view(pid) if pid in seg_parts else None
        except CorruptionError as e:
            view = None
            error = str(e)
        metas[pid] = view.entries if view else []
        sizes[pid] = {e.seq: e.disk_bytes for e in metas[pid]}
        if view:
            sizes[pid].update((d.seq, d.size_bytes) for d in view.damaged)
            if view.damaged:  # the rest of the partition is still shown
                error = "; ".join(f"{d.error} (run `quiver fsck`)" for d in view.damaged)
        if pid not in pids:  # counted in the store's bytes only
            store_bytes += sum(sizes[pid].values()) + wal_usage(store, pid)[1]
            continue
        row = _partition_row(store, pid, metas[pid], sizes[pid], beats.get(pid), now_ns, error)
        store_bytes += row["bytes"]
        rows.append(row)

    registry = open_registry(store)
    subs = []
    unregistered = store.unregistered_records(registry)
    if registry is not None:
        try:
            names = select("subscriber", subscribers, sorted(registry.subscribers()))
            lags = lag_index({pid: metas[pid] for pid in pids}, sizes)  # the rows asked for
            for name in names:
                subs.append(_subscriber_row(registry, name, lags, now_ns, store))
        finally:
            registry.close()
    else:
        select("subscriber", subscribers, [])

    seg_bytes = sum(p["segment_bytes"] for p in rows)
    wal_bytes = sum(p["wal_bytes"] for p in rows)
    cap = store.config.retention.size_cap_bytes
    policy = store.policy
    return {
        "policy": {
            "generation": policy.generation,
            **{o: policy.shown(o) for o in POLICY_OPTIONS},
            "damaged": policy.damaged,  # POLICY unreadable: the conservative policy applies
        },
        "schema": SCHEMA,
        "path": store.root,
        "segments_url": store.segments_url,
        "wal_root": store.wal_root,
        "now_ns": now_ns,
        "filters": {"partition": list(partitions), "subscriber": list(subscribers)},
        "partitions": rows,
        "subscribers": subs,
        "unregistered_records": unregistered,
        "totals": {
            "partitions": len(rows),
            "segments": sum(p["segments"] for p in rows),
            "segment_bytes": seg_bytes,
            "wal_bytes": wal_bytes,
            "bytes": seg_bytes + wal_bytes,
            "store_bytes": store_bytes,
            "size_cap_bytes": cap,
            "size_cap_used": store_bytes / cap if cap else None,
            "size_cap_policy": store.config.retention.size_cap_policy.value,
            "subscribers": len(subs),
        },
    }


def select(kind: str, patterns: Sequence[str], names: Sequence[str]) -> list[str]:
    """``names`` matching any of ``patterns`` (shell-style globs; none: all of them).

    A pattern that matches nothing is a usage error naming what exists, so a typo
    never reads as "nothing to show".
    """
    if not patterns:
        return list(names)
    for pat in patterns:
        if not any(fnmatch.fnmatchcase(n, pat) for n in names):
            shown = ", ".join(names[:20]) + (
                f", ... ({len(names)} in all)" if len(names) > 20 else ""
            )
            raise CliError(f"no {kind} matches {pat!r}; the store has: {shown or 'none'}")
    return [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]


def filter_options(func: F) -> F:
    """``--partition GLOB`` and ``--subscriber GLOB``, each repeatable."""
    func = click.option(
        "--subscriber",
        "subscriber_globs",
        multiple=True,
        metavar="NAME",
        help="Only this subscriber (repeatable; a glob such as 'export*').",
    )(func)
    return click.option(
        "--partition",
        "partition_globs",
        multiple=True,
        metavar="GLOB",
        help="Only partitions matching GLOB (repeatable), e.g. 'host1-*'.",
    )(func)


def _partition_row(
    store: QuiverStore,
    pid: str,
    metas: list[ManifestEntry],
    sizes: dict[int, int],
    beat: dict[str, Any] | None,
    now_ns: int,
    error: str | None,
) -> dict[str, Any]:
    files, wal_bytes = wal_usage(store, pid)
    beat = beat or {}
    holder = beat.get("holder_pid")  # object root: the writer is its lease's holder
    if holder is not None and not beat.get("beat_is_holders"):
        # the heartbeat here is an earlier writer's: the holder's is on its own disk
        beat = {k: beat[k] for k in ("live", "holder_pid", "holder_host") if k in beat}
    live = bool(beat.get("live"))
    has_beat = "written_ns" in beat
    last_write = beat.get("last_write_ns")
    open_since = beat.get("open_since_ns")
    open_bytes = beat.get("open_segment_bytes") if has_beat else None
    if open_since is not None:  # a dead writer's data has waited since then too
        open_age: float | None = max(0.0, (now_ns - open_since) / 1e9)
    elif has_beat:
        open_age = 0.0 if not open_bytes else beat.get("open_segment_age_s")
    else:
        open_age = None
    return {
        "partition": pid,
        "segments": len(sizes),
        "segment_bytes": sum(sizes.values()),
        "rows": sum(m.rows for m in metas),
        "first_seq": min(sizes) if sizes else None,
        "last_seq": max(sizes) if sizes else None,
        "wal_files": files,
        "wal_bytes": wal_bytes,
        "bytes": sum(sizes.values()) + wal_bytes,
        "writer_live": live,
        "stale": not live,
        "writer_pid": beat.get("pid") if holder is None else (holder if holder >= 0 else None),
        "writer_host": beat.get("holder_host"),
        "heartbeat_ns": beat.get("written_ns"),
        "open_segment_bytes": open_bytes,
        "open_segment_rows": beat.get("open_segment_rows") if has_beat else None,
        "open_segment_age_s": open_age,
        "last_write_ns": last_write,
        "last_write_age_s": max(0.0, (now_ns - last_write) / 1e9) if last_write else None,
        "pending_txns": beat.get("pending_txns") if has_beat else None,
        "error": error,
    }


IDLE_WARNING_S = 3600.0
"""A subscriber that pins bytes and has not acknowledged for this long is warned about."""


@dataclasses.dataclass(frozen=True)
class _OnDisk:
    """A segment as status counts it: its bytes are its ``.arrow`` plus its ``.meta``
    on disk (its metadata's ``size_bytes`` when the listing did not see it)."""

    partition: str
    seq: int
    size_bytes: int
    min_ingestion_ns: int
    max_ingestion_ns: int
    rows: int


def lag_index(
    metas: Mapping[str, Sequence[SegmentMeta | ManifestEntry]],
    sizes: Mapping[str, Mapping[int, int]],
) -> RetainedIndex:
    """The index a subscriber's lag is read from (:meth:`RetainedIndex.lag`, the one
    computation of lag), over the segments listed with their bytes on disk."""
    return RetainedIndex.from_listing(
        {
            pid: [
                _OnDisk(pid, m.seq, sizes.get(pid, {}).get(m.seq, m.size_bytes),
                        m.min_ingestion_ns, m.max_ingestion_ns, m.rows)
                for m in ms
            ]
            for pid, ms in metas.items()
        }
    )  # fmt: skip


def _subscriber_row(
    registry: SubscriberRegistry,
    name: str,
    lags: RetainedIndex,
    now_ns: int,
    store: QuiverStore | None = None,
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    splits: list[LagSplit] = []
    for pid in lags.partitions():
        hwm = int(registry.hwm(name, pid))
        gaps = set(registry.gaps(name, pid))
        split = lag_split(lags, name, pid, hwm, gaps)
        splits.append(split)
        rows.append(
            {
                "partition": pid,
                "hwm": hwm,
                "gaps": len(gaps),
                "lag_segments": split.segments,
                "lag_bytes": split.bytes,
                "lag_seconds": _age(now_ns, split.oldest_ns),
                "head_lag_segments": split.head_segments,
                "head_lag_seconds": _age(now_ns, split.head_oldest_ns),
                "head_lag_rows": split.head_rows,
                "backlog_segments": split.backlog_segments,
                "backlog_bytes": split.backlog_bytes,
                "backlog_rows": split.backlog_rows,
            }
        )
    total = subscriber_lag(splits, now_ns)
    rec = records.read_record_or_none(store.objects, name) if store is not None else None
    last = rec.last_ack_ns if rec is not None else None
    live = store.kind.live.is_live(name) if store is not None else False
    idle_s = (now_ns - rec.last_active_ns) / 1e9 if rec is not None else None
    lag_bytes = total.bytes
    return {
        "name": name,
        "lag_segments": total.segments,
        "lag_bytes": lag_bytes,
        "lag_seconds": total.seconds,
        "backlog_segments": total.backlog_segments,
        "backlog_bytes": total.backlog_bytes,
        "backlog_seconds": total.backlog_seconds,
        "backlog_rows": total.backlog_rows,
        "head_lag_segments": total.head_segments,
        "head_lag_seconds": total.head_seconds,
        "head_lag_rows": total.head_rows,
        "horizon_dropped_segments": rec.horizon_dropped_segments if rec is not None else 0,
        "horizon_dropped_rows": rec.horizon_dropped_rows if rec is not None else 0,
        "partitions": rows,
        "registered_ns": rec.created_ns if rec is not None else None,
        "last_ack_ns": last,
        "live": live,
        "idle_seconds": idle_s,
        "pinning_idle": bool(
            not live and lag_bytes and idle_s is not None and idle_s >= IDLE_WARNING_S
        ),
    }


_age = age_s


OTHER_MACHINES = (
    "this machine's: writers on other machines keep their WAL and heartbeat on their own disks"
)


def render_status(doc: dict[str, Any], wal_note: str | None) -> str:
    """The human view of :func:`collect_status`'s document; ``wal_note``: the root
    kind's (:meth:`~quiver_spark.root_kind.RootKind.wal_note`), set when the WALs
    shown are only this machine's writers'."""
    now = doc["now_ns"]
    out = [f"Quiver store {doc['path']}", f"  segments: {doc['segments_url']}"]
    if wal_note is not None:  # WAL bytes and heartbeats: this machine's writers only
        out.append(f"  wal:      {doc['wal_root']} ({OTHER_MACHINES})")
    elif doc["wal_root"] != os.path.join(doc["path"], layout.partitions_dir()):
        out.append(f"  wal:      {doc['wal_root']}")
    pol = doc["policy"]
    out.append(
        f"  policy:   generation {pol['generation']}: "
        + ", ".join(f"{o}={v}" for o, v in pol.items() if o not in ("generation", "damaged"))
        + " (change with `quiver config PATH set KEY=VALUE`)"
        if not pol.get("damaged")
        else f"  policy:   DAMAGED, the most conservative applies: {pol['damaged']} "
        "(repair with `quiver config PATH repair --from-last-good`)"
    )
    out.append("")
    rows = []
    for p in doc["partitions"]:
        writer = "live" if p["writer_live"] else "stale"
        if p.get("writer_host") and p["writer_pid"] is not None:  # its lease names it
            writer = f"live (pid {p['writer_pid']} on {p['writer_host']})"
        elif p["heartbeat_ns"] is None:
            writer = "live (no heartbeat yet)" if p["writer_live"] else "stale (no heartbeat)"
        open_seg = (
            f"{human_bytes(p['open_segment_bytes'])} / {human_seconds(p['open_segment_age_s'])}"
            if p["open_segment_bytes"] is not None
            else "-"
        )
        rows.append(
            [
                p["partition"],
                p["segments"],
                human_bytes(p["segment_bytes"]),
                p["rows"],
                human_bytes(p["wal_bytes"]),
                open_seg,
                human_time(p["last_write_ns"], now),
                writer,
                "-" if p["pending_txns"] is None else p["pending_txns"],
            ]
        )
    headers = ["PARTITION", "SEGMENTS", "BYTES", "ROWS", "WAL", "OPEN (bytes/age)",
               "LAST WRITE", "WRITER", "PENDING TXNS"]  # fmt: skip
    filters = doc.get("filters") or {}
    t = doc["totals"]
    if filters.get("subscriber") and not filters.get("partition"):
        # a question about subscribers: the partitions fold into one line
        live = sum(1 for p in doc["partitions"] if p["writer_live"])
        out.append(
            f"Partitions: {t['partitions']} ({live} with a live writer), {t['segments']} "
            f"segments, {human_bytes(t['bytes'])} (--partition GLOB lists them)"
        )
    else:
        out.append("Partitions")
        out.append(render_table(headers, rows) if rows else "  (none)")
    for p in doc["partitions"]:
        if p["error"]:
            out.append(f"  ! {p['partition']}: {p['error']} (run `quiver fsck`)")
    out.append("")
    out.append("Subscribers")
    srows = []
    for s in doc["subscribers"]:
        for r in s["partitions"]:
            srows.append(
                [
                    s["name"],
                    r["partition"],
                    r["hwm"],
                    r["gaps"],
                    r["lag_segments"],
                    human_bytes(r["lag_bytes"]),
                    human_seconds(r["lag_seconds"]) if r["lag_segments"] else "-",
                ]
            )
        if not s["partitions"]:
            srows.append([s["name"], "-", "-", "-", 0, human_bytes(0), "-"])
    sheaders = ["SUBSCRIBER", "PARTITION", "HWM", "GAPS", "LAG SEGS", "LAG BYTES", "LAG TIME"]
    out.append(render_table(sheaders, srows) if srows else "  (none)")
    for s in doc["subscribers"]:
        out.append(
            f"  {s['name']}: {'live' if s['live'] else 'not running'}, last acknowledged "
            f"{human_time(s['last_ack_ns'], now) if s['last_ack_ns'] else 'never'}"
        )
        if s["lag_segments"]:
            out.append(
                f"    head lag {s['head_lag_segments']} segments, {s['head_lag_rows']} rows "
                f"({human_seconds(s['head_lag_seconds'])}), backlog "
                f"{s['backlog_segments']} segments, {s['backlog_rows']} rows, "
                f"{human_bytes(s['backlog_bytes'])} "
                f"(oldest {human_seconds(s['backlog_seconds'])})"
            )
        if s["horizon_dropped_segments"]:
            out.append(
                f"    dropped past its acceptance horizon: {s['horizon_dropped_segments']} "
                f"segments, {s['horizon_dropped_rows']} rows"
            )
        if s["pinning_idle"]:
            out.append(
                f"  WARNING: subscriber {s['name']} has not acknowledged for "
                f"{human_seconds(s['idle_seconds'])} and pins {human_bytes(s['lag_bytes'])}; "
                f"remove it (quiver subscribers PATH remove {s['name']}) or set the store "
                "policy subscriber.expire_after (quiver config PATH set ...)"
            )
    for name in doc.get("unregistered_records", []):
        out.append(f"  WARNING: {records.unregistered_message(doc['path'], name)}")
    out.append("")
    total = (
        f"Total: {t['partitions']} partitions, {t['segments']} segments, "
        f"{human_bytes(t['segment_bytes'])} segments + {human_bytes(t['wal_bytes'])} WAL "
        f"= {human_bytes(t['bytes'])}"
    )
    if filters.get("partition"):
        total += f" (whole store {human_bytes(t['store_bytes'])})"
    if t["size_cap_bytes"]:
        total += (
            f" of size cap {human_bytes(t['size_cap_bytes'])} "
            f"({t['size_cap_used'] * 100:.1f}%, {t['size_cap_policy']})"
        )
    else:
        total += " (no size cap configured)"
    out.append(total)
    return "\n".join(out)


@click.command("status")
@store_arguments
@filter_options
def status(
    args: StoreArgs, partition_globs: tuple[str, ...], subscriber_globs: tuple[str, ...]
) -> None:
    """Show partitions, subscribers and disk use of the store at PATH.

    Per partition: segments, bytes (.arrow and .meta), WAL bytes, the open segment's
    bytes and age, the writer's last write (its heartbeat; "stale" when no writer
    holds the partition) and pending transactions. Per subscriber and partition:
    high-water mark, gap set size and lag in segments, bytes and seconds. Totals add
    up the rows shown and are compared with the store's retention.size_cap.

    On a large store, narrow it down: --subscriber NAME shows that subscriber with
    the partitions folded into one line; --partition GLOB (e.g. 'host1-*') lists
    those partitions. Both repeat and take shell-style globs.
    """
    doc, wal_note = with_store(
        args,
        lambda store: (
            collect_status(store, partitions=partition_globs, subscribers=subscriber_globs),
            store.kind.wal_note(store.wal_root),
        ),
    )
    if args.as_json:
        emit_json(doc)
    else:
        click.echo(render_status(doc, wal_note))
    if any(p["error"] for p in doc["partitions"]):
        raise SystemExit(EXIT_TROUBLE)
