"""``quiver status PATH``: partitions, subscribers and totals of a store, read-only.

JSON schema (``--json``; ``"schema": "quiver.status/1"``; times are ns since the
epoch, ages and lags seconds, sizes bytes; ``null`` when unknown)::

    {
      "schema": "quiver.status/1", "path": str, "segments_url": str, "wal_root": str,
      "now_ns": int,
      "partitions": [{
        "partition": str,
        "segments": int, "segment_bytes": int, "rows": int,
        "first_seq": int|null, "last_seq": int|null,
        "wal_files": int, "wal_bytes": int,
        "writer_live": bool,          # a process holds the partition's lock now
        "stale": bool,                # heartbeat figures are from a writer that is gone
        "writer_pid": int|null, "heartbeat_ns": int|null,
        "open_segment_bytes": int|null, "open_segment_rows": int|null,
        "open_segment_age_s": float|null,   # since the open segment began, also when
                                            # its writer died (how long its rows wait)
        "last_write_ns": int|null, "last_write_age_s": float|null,
        "pending_txns": int|null,
        "error": str|null             # a corrupt file met while listing (run fsck)
      }],
      "subscribers": [{
        "name": str,
        "lag_segments": int, "lag_bytes": int, "lag_seconds": float|null,
        "registered_ns": int|null, "last_ack_ns": int|null,   # from its record (§8.10)
        "live": bool,                  # a query or consumer holds it now
        "idle_seconds": float|null,    # since the last ack (or registration)
        "pinning_idle": bool,          # not live, idle >= 1h, and holding unread bytes
        "partitions": [{"partition": str, "hwm": int, "gaps": int,
                        "lag_segments": int, "lag_bytes": int,
                        "lag_seconds": float|null}]
      }],
      "totals": {"partitions": int, "segments": int, "segment_bytes": int,
                 "wal_bytes": int, "bytes": int, "size_cap_bytes": int|null,
                 "size_cap_used": float|null, "size_cap_policy": str,
                 "subscribers": int},
      "policy": {"generation": int, option: str}   # the store's recorded policy (§6.6)
    }

Lag of a subscriber in a partition counts the published segments it has not
acknowledged (``dropped`` counts as acknowledged); ``lag_seconds`` is now minus the
oldest ingestion time among them (0 when nothing is behind).
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from .. import format as fmt
from ..errors import CorruptionError
from ..policy import POLICY_OPTIONS
from ..segment import SegmentMeta
from ..store import QuiverStore
from ..subscribers import SubscriberRegistry, records
from ..wal import list_wal_files
from .common import (
    EXIT_TROUBLE,
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
from .registry import open_registry

SCHEMA = "quiver.status/1"


def wal_usage(store: QuiverStore, pid: str) -> tuple[int, int]:
    """``(files, bytes)`` of a partition's WAL, from the directory (not the heartbeat)."""
    files = 0
    total = 0
    for info in list_wal_files(os.path.join(store.wal_root, pid, fmt.WAL_DIR), store.io):
        files += 1
        total += info.size
    return files, total


def partition_ids(store: QuiverStore) -> list[str]:
    """Partitions with segments or a WAL directory, sorted."""
    return sorted(set(store.partitions()) | set(wal_partitions(store)))


def collect_status(store: QuiverStore, now_ns: int | None = None) -> dict[str, Any]:
    """Everything ``quiver status`` shows, as the JSON document described above."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    beats = store.heartbeats()
    metas: dict[str, list[SegmentMeta]] = {}
    partitions: list[dict[str, Any]] = []
    seg_parts = set(store.partitions())
    for pid in partition_ids(store):
        error = None
        try:
            survey = store.segment_location.survey(pid) if pid in seg_parts else None
        except CorruptionError as e:
            metas[pid] = []
            error = str(e)
        else:
            metas[pid] = survey.metas if survey else []
            if survey and survey.damaged:  # the rest of the partition is still shown
                error = "; ".join(f"{d.error} (run `quiver fsck`)" for d in survey.damaged)
        partitions.append(_partition_row(store, pid, metas[pid], beats.get(pid), now_ns, error))

    registry = open_registry(store)
    subscribers = []
    if registry is not None:
        try:
            for name in sorted(registry.subscribers()):
                subscribers.append(_subscriber_row(registry, name, metas, now_ns, store))
        finally:
            registry.close()

    seg_bytes = store.segment_location.total_bytes()
    wal_bytes = sum(p["wal_bytes"] for p in partitions)
    cap = store.config.retention.size_cap_bytes
    policy = store.policy
    return {
        "policy": {
            "generation": policy.generation,
            **{o: policy.shown(o) for o in POLICY_OPTIONS},
        },
        "schema": SCHEMA,
        "path": store.root,
        "segments_url": store.segments_url,
        "wal_root": store.wal_root,
        "now_ns": now_ns,
        "partitions": partitions,
        "subscribers": subscribers,
        "totals": {
            "partitions": len(partitions),
            "segments": sum(p["segments"] for p in partitions),
            "segment_bytes": seg_bytes,
            "wal_bytes": wal_bytes,
            "bytes": seg_bytes + wal_bytes,
            "size_cap_bytes": cap,
            "size_cap_used": (seg_bytes + wal_bytes) / cap if cap else None,
            "size_cap_policy": store.config.retention.size_cap_policy.value,
            "subscribers": len(subscribers),
        },
    }


def _partition_row(
    store: QuiverStore,
    pid: str,
    metas: list[SegmentMeta],
    beat: dict[str, Any] | None,
    now_ns: int,
    error: str | None,
) -> dict[str, Any]:
    files, wal_bytes = wal_usage(store, pid)
    beat = beat or {}
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
        "segments": len(metas),
        "segment_bytes": sum(m.size_bytes for m in metas),
        "rows": sum(m.rows for m in metas),
        "first_seq": metas[0].seq if metas else None,
        "last_seq": metas[-1].seq if metas else None,
        "wal_files": files,
        "wal_bytes": wal_bytes,
        "writer_live": live,
        "stale": not live,
        "writer_pid": beat.get("pid"),
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


def _subscriber_row(
    registry: SubscriberRegistry,
    name: str,
    metas: dict[str, list[SegmentMeta]],
    now_ns: int,
    store: QuiverStore | None = None,
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for pid in sorted(metas):
        hwm = int(registry.hwm(name, pid))
        gaps = set(registry.gaps(name, pid))
        behind = [m for m in metas[pid] if m.seq > hwm and m.seq not in gaps]
        oldest = min((m.min_ingestion_ns for m in behind), default=None)
        rows.append(
            {
                "partition": pid,
                "hwm": hwm,
                "gaps": len(gaps),
                "lag_segments": len(behind),
                "lag_bytes": sum(m.size_bytes for m in behind),
                "lag_seconds": max(0.0, (now_ns - oldest) / 1e9) if oldest is not None else 0.0,
            }
        )
    rec = records.read_record(store.root, store.io, name) if store is not None else None
    last = rec.last_ack_ns if rec is not None else None
    live = records.is_live(store.root, name) if store is not None else False
    idle_s = (now_ns - rec.last_active_ns) / 1e9 if rec is not None else None
    lag_bytes = sum(r["lag_bytes"] for r in rows)
    return {
        "name": name,
        "lag_segments": sum(r["lag_segments"] for r in rows),
        "lag_bytes": lag_bytes,
        "lag_seconds": max((r["lag_seconds"] for r in rows), default=0.0),
        "partitions": rows,
        "registered_ns": rec.created_ns if rec is not None else None,
        "last_ack_ns": last,
        "live": live,
        "idle_seconds": idle_s,
        "pinning_idle": bool(
            not live and lag_bytes and idle_s is not None and idle_s >= IDLE_WARNING_S
        ),
    }


def render_status(doc: dict[str, Any]) -> str:
    """The human view of :func:`collect_status`'s document."""
    now = doc["now_ns"]
    out = [f"Quiver store {doc['path']}", f"  segments: {doc['segments_url']}"]
    if doc["wal_root"] != os.path.join(doc["path"], fmt.PARTITIONS_DIR):
        out.append(f"  wal:      {doc['wal_root']}")
    pol = doc["policy"]
    out.append(
        f"  policy:   generation {pol['generation']}: "
        + ", ".join(f"{o}={v}" for o, v in pol.items() if o != "generation")
        + " (change with `quiver config PATH set KEY=VALUE`)"
    )
    out.append("")
    rows = []
    for p in doc["partitions"]:
        writer = "live" if p["writer_live"] else "stale"
        if p["heartbeat_ns"] is None:
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
    out.append("Partitions")
    headers = ["PARTITION", "SEGMENTS", "BYTES", "ROWS", "WAL", "OPEN (bytes/age)",
               "LAST WRITE", "WRITER", "PENDING TXNS"]  # fmt: skip
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
        if s["pinning_idle"]:
            out.append(
                f"  WARNING: subscriber {s['name']} has not acknowledged for "
                f"{human_seconds(s['idle_seconds'])} and pins {human_bytes(s['lag_bytes'])}; "
                f"remove it (quiver subscribers PATH remove {s['name']}) or set the store "
                "policy subscriber.expire_after (quiver config PATH set ...)"
            )
    t = doc["totals"]
    out.append("")
    total = (
        f"Total: {t['partitions']} partitions, {t['segments']} segments, "
        f"{human_bytes(t['segment_bytes'])} segments + {human_bytes(t['wal_bytes'])} WAL "
        f"= {human_bytes(t['bytes'])}"
    )
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
def status(args: StoreArgs) -> None:
    """Show partitions, subscribers and disk use of the store at PATH.

    Per partition: segments, bytes, WAL bytes, the open segment's bytes and age, the
    writer's last write (its heartbeat; "stale" when no writer holds the partition)
    and pending transactions. Per subscriber and partition: high-water mark, gap set
    size and lag in segments, bytes and seconds. Totals are compared with
    retention.size_cap when one is given (--option or --config).
    """
    doc = with_store(args, lambda store: collect_status(store))
    if args.as_json:
        emit_json(doc)
    else:
        click.echo(render_status(doc))
    if any(p["error"] for p in doc["partitions"]):
        raise SystemExit(EXIT_TROUBLE)
