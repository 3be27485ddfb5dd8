"""``quiver gc PATH``: the maintenance step, run by hand or from cron.

1. Finalize idle partitions: every partition whose writer is gone (its lock is free)
   and whose WAL still holds committed data is recovered and sealed into a segment
   (:meth:`QuiverStore.finalize_idle_partitions`). Partitions with a live writer are
   left to it.
2. Retention (:meth:`QuiverStore.run_retention`, the same pass a writer's
   maintenance and a subscriber's acknowledgement run, under the store's recorded
   policy, `quiver config PATH`): delete segments every subscriber acknowledged
   (steady state), segments past
   ``retention.max_age``, and under the size cap the oldest
   acknowledged ones, or under ``drop_oldest`` the oldest unacknowledged ones (each
   recorded as ``dropped``).

``--dry-run`` changes nothing and prints the plan. ``--full`` lists every partition
instead of reading its MANIFEST (ARCHITECTURE.md §11.1: the safety net for files
removed by hand; a long-lived process does it every 5 minutes); on an object root it
also removes orphans, the segment objects of another lease holder that its MANIFEST
does not list, whose seq is void or below its ``high`` (§11.3).

JSON schema (``--json``; ``"schema": "quiver.gc/1"``)::

    {
      "schema": "quiver.gc/1", "path": str, "dry_run": bool,
      "finalized": [{"partition": str, "seq": int|null, "wal_records": int}],
          # seq is null in a dry run (not known until sealed); wal_records counts the
          # WAL data records no segment covered (undecided transactions included)
      "skipped_live": [str],                  # partitions whose writer is running
      "unreadable_partitions": [{"partition": str, "error": str}],
          # STATE or WAL damaged: skipped (exit 1), everything else still done
      "deleted": [{"partition": str, "seq": int, "bytes": int, "reason": str}],
          # reason: "acked" | "time" | "size_cap" | "drop_oldest"
      "dropped": {subscriber: {partition: [seq]}},   # recorded as dropped (drop_oldest)
      "freed_bytes": int,
      "throttled": bool,   # over the size cap with nothing deletable (backpressure)
      "damaged": [{"partition": str, "seq": int, "path": str, "error": str, "bytes": int}],
          # segments whose .meta this run found failing verification: kept and
          # counted, never deleted by gc; `quiver fsck --quarantine` moves them aside
      "retained_verified": bool,
          # true (--full): every retained segment's .meta was read and verified (a
          # listed one whose .meta is gone, or whose .arrow is not its published
          # size, is damaged);
          # false: only those the pass read (the ones it chose to delete), so an empty
          # "damaged" says nothing of the others: `quiver fsck` verifies the store
      "orphans": [{"partition": str, "seq": int}]
          # --full on an object root: objects no MANIFEST published, removed (would
          # be, in a dry run); [] otherwise
    }
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import click

from .. import format as fmt
from .. import layout
from ..control.manifest import ManifestEntry
from ..errors import CorruptionError
from ..fs import partition_locked
from ..ranges import RangeSet
from ..segment.catalog import DamagedSegment, SegmentLocation
from ..store import QuiverStore
from ..wal import list_wal_files, scan_wal_file, wal_limits
from .common import (
    StoreArgs,
    emit_json,
    human_bytes,
    render_table,
    store_arguments,
    wal_partitions,
    with_store,
)
from .exits import EXIT_TROUBLE

SCHEMA = "quiver.gc/1"


def unfinalized_records(store: QuiverStore, pid: str) -> int:
    """Data records in a partition's WAL that no segment covers yet (read-only scan).

    Counts records of undecided transactions too (finalizing may discard them).
    """
    state_path = os.path.join(store.wal_root, layout.partition_state(pid))
    try:
        state = fmt.decode_frame(state_path, fmt.MAGIC_STATE, store.io.read_file(state_path))
        covered = RangeSet(tuple(r) for r in state.get("covered", []))
        limits = wal_limits(state_path, state)
    except FileNotFoundError:
        covered, limits = RangeSet(), {}
    infos = list_wal_files(os.path.join(store.wal_root, layout.wal_dir(pid)), store.io)
    count = 0
    for i, info in enumerate(infos):
        # no salvage: damage the writer's recovery would refuse is reported, not skipped
        scan = scan_wal_file(
            info.path,
            last=i == len(infos) - 1,
            salvage=False,
            io=store.io,
            upto=limits.get(info.first_seq),
        )
        count += sum(
            1 for r in scan.records
            if r.rtype in (fmt.REC_BATCH, fmt.REC_STREAM) and r.seq not in covered
        )  # fmt: skip
    return count


def idle_partitions(
    store: QuiverStore, unreadable: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """``(idle, live)``: partitions with unfinalized WAL data and no writer, and with one.

    A partition whose STATE or WAL cannot be read goes to ``unreadable`` (partition ->
    error naming the file) and is skipped: one damaged partition never stops gc.
    """
    idle: list[str] = []
    live: list[str] = []
    for pid in wal_partitions(store):
        if not store.io.listdir(os.path.join(store.wal_root, layout.wal_dir(pid))):
            continue
        if partition_locked(os.path.join(store.wal_root, layout.partition_lock(pid))):
            live.append(pid)
            continue
        try:
            if unfinalized_records(store, pid):
                idle.append(pid)
        except CorruptionError as e:
            if unreadable is None:
                raise
            unreadable[pid] = str(e)
    return idle, live


log = logging.getLogger(__name__)

REASONS = (
    ("delete_steady", "acked"),
    ("delete_time", "time"),
    ("delete_size", "size_cap"),
    ("drop_size", "drop_oldest"),
)


def _retention(
    store: QuiverStore, *, dry_run: bool, now_ns: int, full: bool = False
) -> dict[str, Any]:
    """Plan (dry run) or apply one retention pass; the ``deleted``... part of the document."""
    result = store.run_retention(now_ns, dry_run=dry_run, listing=full)
    plan, dropped, damaged, sizes = result.plan, result.dropped, result.damaged, result.sizes
    if full:  # the whole store's .meta files: never a plain gc's start cost
        damaged = [*damaged, *_damaged_retained(store, {(d.partition, d.seq) for d in damaged})]
    deleted = [
        {"partition": pid, "seq": seq, "bytes": sizes.get((pid, seq), 0), "reason": reason}
        for attr, reason in REASONS
        for pid, seq in getattr(plan, attr)
    ]
    deleted.sort(key=lambda d: (d["partition"], d["seq"]))
    return {
        "deleted": deleted,
        "dropped": dropped,
        "freed_bytes": sum(d["bytes"] for d in deleted),
        "throttled": bool(plan.throttle),
        "damaged": [
            {
                "partition": d.partition,
                "seq": d.seq,
                "path": d.path,
                "error": d.error,
                "bytes": d.size_bytes,
            }
            for d in sorted(damaged, key=lambda d: (d.partition, d.seq))
        ],
        "retained_verified": full,
    }


def _damaged_retained(store: QuiverStore, known: set[tuple[str, int]]) -> list[DamagedSegment]:
    """The retained segments whose ``.meta`` fails verification, beyond ``known``.

    A pass reads only the ``.meta`` of the segments it chose to delete (a new process
    starts from each partition's MANIFEST, §11.1); ``gc --full``, which lists every
    partition anyway, also reads those of the segments it keeps, so that damage is
    named where it was found, and a segment its MANIFEST lists whose ``.meta`` is gone
    or whose ``.arrow`` differs from its published size (one listing per partition).
    A plain gc does not: its start cost stays that of the partitions, and verifying
    every retained segment is ``quiver fsck``'s."""
    loc = store.segment_location
    found: list[DamagedSegment] = []
    for pid in store.partitions():
        entries = loc.view(pid).entries
        arrows = _arrow_sizes(loc, pid)
        for entry in entries:
            if (pid, entry.seq) in known:
                continue
            got = loc.probe(pid, entry.seq)
            if isinstance(got, DamagedSegment):
                found.append(got)
            elif got is None:  # listed, its .meta gone: damage unless deleted since
                if any(e.seq == entry.seq for e in loc.view(pid).entries):
                    found.append(_damaged(loc, entry, "its .meta is missing"))
            elif arrows.get(entry.seq, got.size_bytes) != got.size_bytes:
                found.append(
                    _damaged(
                        loc,
                        entry,
                        f"segment size {arrows[entry.seq]} differs from published size "
                        f"{got.size_bytes}",
                    )
                )
    return found


def _arrow_sizes(loc: SegmentLocation, pid: str) -> dict[int, int]:
    """``{seq: bytes}`` of partition ``pid``'s ``.arrow`` files, from one listing
    (``{}`` when it fails: the sizes are then not compared)."""
    b = loc.backend
    try:
        listed = b.entries(b.join(pid), sizes=True)
    except OSError:
        return {}
    return {s: n for name, n in listed.items() if (s := layout.parse_segment_data(name))}


def _damaged(loc: SegmentLocation, entry: ManifestEntry, error: str) -> DamagedSegment:
    """A kept segment ``gc --full`` found damaged other than in its ``.meta``'s bytes:
    named by its ``.arrow``, as ``quiver fsck`` names it."""
    return DamagedSegment(
        entry.partition, entry.seq, loc.data_path(entry.partition, entry.seq), error,
        entry.size_bytes,
    )  # fmt: skip


def run_gc(
    store: QuiverStore, *, dry_run: bool, now_ns: int | None = None, full: bool = False
) -> dict[str, Any]:
    """Finalize idle partitions and apply retention; the JSON document described above."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    unreadable: dict[str, str] = {}
    idle, live = idle_partitions(store, unreadable)
    finalized: list[dict[str, Any]] = []
    if dry_run:
        finalized = [
            {"partition": p, "seq": None, "wal_records": unfinalized_records(store, p)}
            for p in idle
        ]
    else:
        before = {p: unfinalized_records(store, p) for p in idle}
        for pid, seq in store.finalize_idle_partitions():
            finalized.append({"partition": pid, "seq": seq, "wal_records": before.get(pid, 0)})
        for pid, error in store.idle_failures.items():  # recovery refused: named, exit 1
            unreadable.setdefault(pid, error)
    orphans: list[dict[str, Any]] = []
    if full:  # objects no publication will ever list (none where a .meta publishes)
        loc = store.segment_location
        for pid in store.partitions():
            seqs = loc.orphans(pid) if dry_run else loc.remove_orphans(pid)
            orphans.extend({"partition": pid, "seq": seq} for seq in seqs)
    doc = {
        "schema": SCHEMA,
        "path": store.root,
        "dry_run": dry_run,
        "finalized": finalized,
        "skipped_live": sorted(live),
        "unreadable_partitions": [
            {"partition": p, "error": e} for p, e in sorted(unreadable.items())
        ],
        **_retention(store, dry_run=dry_run, now_ns=now_ns, full=full),
        "orphans": orphans,
    }
    if not dry_run and store.has_registry():
        try:  # its evictions, continued across runs (advisory)
            store.publish_process_metrics("gc")
        except OSError as e:
            log.warning("quiver.metrics.unwritten instance=gc error=%s", e)
    return doc


def render_gc(doc: dict[str, Any]) -> str:
    """The human view of :func:`run_gc`'s document."""
    verb = "would " if doc["dry_run"] else ""
    out = [f"gc {doc['path']}" + (" (dry run: nothing changed)" if doc["dry_run"] else "")]
    if doc["finalized"]:
        for f in doc["finalized"]:
            seg = f"segment {f['seq']}" if f["seq"] is not None else "a segment"
            out.append(
                f"  {verb}finalize idle partition {f['partition']} into {seg} "
                f"({f['wal_records']} WAL records)"
            )
    else:
        out.append("  no idle partition to finalize")
    for pid in doc["skipped_live"]:
        out.append(f"  partition {pid} has a live writer: left to it")
    if doc["deleted"]:
        out.append(f"  {verb}delete {len(doc['deleted'])} segment(s):")
        rows = [[d["partition"], d["seq"], human_bytes(d["bytes"]), d["reason"]]
                for d in doc["deleted"]]  # fmt: skip
        out.extend("    " + line for line in
                   render_table(["PARTITION", "SEQ", "BYTES", "REASON"], rows).splitlines())  # fmt: skip
    else:
        out.append("  nothing to delete")
    for sub, parts in sorted(doc["dropped"].items()):
        for pid, seqs in sorted(parts.items()):
            out.append(f"  {verb}record {len(seqs)} segment(s) of {pid} as dropped for {sub}")
    for d in doc.get("damaged", []):
        out.append(
            f"  kept damaged segment {d['seq']} of {d['partition']} ({d['path']}: {d['error']}); "
            f"`quiver fsck {doc['path']} --quarantine` moves it aside"
        )
    for u in doc.get("unreadable_partitions", []):
        out.append(
            f"  skipped partition {u['partition']}: {u['error']}; run `quiver fsck {doc['path']}`"
        )
    if not doc.get("retained_verified", True):
        out.append(
            f"  kept segments not verified: `quiver fsck {doc['path']}` (or gc --full) reads them"
        )
    if doc.get("orphans"):
        seqs = ", ".join(f"{o['partition']}/{o['seq']}" for o in doc["orphans"])
        out.append(
            f"  {verb}remove {len(doc['orphans'])} orphan segment(s) no MANIFEST published: {seqs}"
        )
    if doc["throttled"]:
        out.append("  over the size cap with nothing deletable: writers are throttled")
    out.append(f"  {'would free' if doc['dry_run'] else 'freed'} {human_bytes(doc['freed_bytes'])}")
    return "\n".join(out)


@click.command("gc")
@store_arguments
@click.option("--dry-run", is_flag=True, help="Print what would be finalized and deleted.")
@click.option(
    "--full",
    is_flag=True,
    help="List every partition instead of reading its MANIFEST (finds files removed by hand).",
)
def gc(args: StoreArgs, dry_run: bool, full: bool) -> None:
    """Finalize idle partitions and delete what retention allows in the store at PATH.

    Idle partitions are those whose writer died or stopped with committed data in
    the WAL. Retention deletes segments every subscriber acknowledged, segments past
    the time limit and, under the size cap, the oldest ones its policy allows.
    """
    doc = with_store(args, lambda store: run_gc(store, dry_run=dry_run, full=full))
    if args.as_json:
        emit_json(doc)
    else:
        click.echo(render_gc(doc))
    if doc["unreadable_partitions"]:  # everything else was done; the damage is named
        raise SystemExit(EXIT_TROUBLE)
