"""``quiver gc PATH``: the maintenance step, run by hand or from cron.

1. Finalize idle partitions: every partition whose writer is gone (its lock is free)
   and whose WAL still holds committed data is recovered and sealed into a segment
   (:meth:`QuiverStore.finalize_idle_partitions`). Partitions with a live writer are
   left to it.
2. Retention (:meth:`QuiverStore.run_retention`): delete segments every subscriber
   acknowledged (steady state), segments past
   ``retention.max_retain_after_ingestion_hours``, and under the size cap the oldest
   acknowledged ones, or under ``drop_oldest`` the oldest unacknowledged ones (each
   recorded as ``dropped``). Pass the store's options (``--option``/``--config``) so
   the cap and time limit are known.

``--dry-run`` changes nothing and prints the plan.

JSON schema (``--json``; ``"schema": "quiver.gc/1"``)::

    {
      "schema": "quiver.gc/1", "path": str, "dry_run": bool,
      "finalized": [{"partition": str, "seq": int|null, "wal_bytes": int}],
          # seq is null in a dry run (not known until sealed)
      "skipped_live": [str],                  # partitions whose writer is running
      "deleted": [{"partition": str, "seq": int, "bytes": int, "reason": str}],
          # reason: "acked" | "time" | "size_cap" | "drop_oldest"
      "dropped": {subscriber: {partition: [seq]}},   # recorded as dropped (drop_oldest)
      "freed_bytes": int,
      "throttled": bool    # over the size cap with nothing deletable (backpressure)
    }
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from .. import format as fmt
from ..errors import CorruptionError, QuiverError
from ..fs import partition_locked
from ..store import QuiverStore
from .common import (
    EXIT_TROUBLE,
    CliError,
    StoreArgs,
    emit_json,
    human_bytes,
    open_store,
    render_table,
    store_arguments,
)
from .status import wal_usage

SCHEMA = "quiver.gc/1"


def idle_partitions(store: QuiverStore) -> tuple[list[str], list[str]]:
    """``(idle, live)``: partitions with WAL files and no writer, and those with one."""
    idle: list[str] = []
    live: list[str] = []
    for pid in store.io.listdir(store.wal_root):
        pdir = os.path.join(store.wal_root, pid)
        if not store.io.listdir(os.path.join(pdir, fmt.WAL_DIR)):
            continue
        (live if partition_locked(os.path.join(pdir, fmt.LOCK_FILE)) else idle).append(pid)
    return idle, live


def run_gc(store: QuiverStore, *, dry_run: bool, now_ns: int | None = None) -> dict[str, Any]:
    """Finalize idle partitions and apply retention; the JSON document described above."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    idle, live = idle_partitions(store)
    finalized: list[dict[str, Any]] = []
    if dry_run:
        finalized = [
            {"partition": p, "seq": None, "wal_bytes": wal_usage(store, p)[1]} for p in idle
        ]
    else:
        before = {p: wal_usage(store, p)[1] for p in idle}
        for pid, seq in store.finalize_idle_partitions():
            finalized.append({"partition": pid, "seq": seq, "wal_bytes": before.get(pid, 0)})
    plan = store.run_retention(now_ns=now_ns, dry_run=dry_run)
    return {
        "schema": SCHEMA,
        "path": store.root,
        "dry_run": dry_run,
        "finalized": finalized,
        "skipped_live": sorted(live),
        **plan,
    }


def render_gc(doc: dict[str, Any]) -> str:
    """The human view of :func:`run_gc`'s document."""
    verb = "would " if doc["dry_run"] else ""
    out = [f"gc {doc['path']}" + (" (dry run: nothing changed)" if doc["dry_run"] else "")]
    if doc["finalized"]:
        for f in doc["finalized"]:
            seg = f"segment {f['seq']}" if f["seq"] is not None else "a segment"
            out.append(
                f"  {verb}finalize idle partition {f['partition']} into {seg} "
                f"(WAL {human_bytes(f['wal_bytes'])})"
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
    if doc["throttled"]:
        out.append("  over the size cap with nothing deletable: writers are throttled")
    out.append(f"  {'would free' if doc['dry_run'] else 'freed'} {human_bytes(doc['freed_bytes'])}")
    return "\n".join(out)


@click.command("gc")
@store_arguments
@click.option("--dry-run", is_flag=True, help="Print what would be finalized and deleted.")
def gc(args: StoreArgs, dry_run: bool) -> None:
    """Finalize idle partitions and delete what retention allows in the store at PATH.

    Idle partitions are those whose writer died or stopped with committed data in
    the WAL. Retention deletes segments every subscriber acknowledged, segments past
    the time limit and, under the size cap, the oldest ones its policy allows.
    """
    store = open_store(args)
    try:
        doc = run_gc(store, dry_run=dry_run)
    except CorruptionError as e:
        raise CliError(f"{e}; run `quiver fsck {args.path}`", EXIT_TROUBLE) from e
    except QuiverError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    finally:
        store.close()
    if args.as_json:
        emit_json(doc)
    else:
        click.echo(render_gc(doc))
