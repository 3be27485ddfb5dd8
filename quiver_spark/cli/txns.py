"""``quiver txns PATH list|discard QUERY_ID --yes``: undecided sink transactions.

Every sink task writes its rows as a transaction that only the driver's commit
decision makes visible (ARCHITECTURE.md §10). A batch that failed and is never rerun
(its query was abandoned, or restarted from a new checkpoint, which gives it a new
query id) leaves its transactions pending: they pin their WAL files forever.

``list`` shows them per partition, from each writer's heartbeat (a writer rewrites
it on every maintenance tick and when it closes). On an object root a transaction
``held`` stays pending whatever its batch's decision: the staged object under its id
is damaged, so the decision may speak of another writer's rows; it is resolved once
the object is repaired, or dropped as not committed once it is removed
(ARCHITECTURE.md §10.2; ``quiver fsck`` names the object). ``discard QUERY_ID`` decides every
pending batch of query ``QUERY_ID`` with no winners, then seals idle partitions so the
rows are dropped and their WAL files freed at once. It refuses (exit 1, nothing
changed) an ``QUERY_ID`` it does not know, listing the query ids that have pending
transactions, and an ``QUERY_ID`` with an undecided transaction in a partition whose
lock is held (a live writer: its query may still commit it), naming the partition
and the holder. It needs ``--yes``: if that query is ever restarted
from its old checkpoint and reruns such a batch, the sink refuses the rerun's commit
with an error rather than store the rows twice or lose them silently.

JSON schemas (``--json``)::

    list:    {"schema": "quiver.txns/1", "path": str,
              "pending": [{"partition": str, "txn": int, "app": str, "version": int,
                           "tag": str, "decided": bool, "writer_live": bool,
                           "held": bool}],   # held: its staged object is damaged
              "note": str}    # object roots only: what is not visible from here
    discard: {"schema": "quiver.txns/1", "path": str, "action": "discarded",
              "app": str, "versions": [int],        # decided now, with no winners
              "already_decided": [int],             # decided before (left as they were)
              "sealed": [[partition, seq]]}         # idle partitions finalized
"""

from __future__ import annotations

from typing import Any

import click

from ..config import validate_name
from ..errors import CliError, ConfigError
from ..store import QuiverStore
from .common import (
    StoreArgs,
    emit_json,
    local_wal_note,
    render_table,
    store_arguments,
    with_store,
    writer_holder,
)
from .exits import EXIT_TROUBLE

SCHEMA = "quiver.txns/1"


@click.command("txns")
@store_arguments
@click.argument("action", type=click.Choice(["list", "discard"]))
@click.argument("app", metavar="[QUERY_ID]", required=False)
@click.option("--yes", is_flag=True, help="For discard: confirm (see the risk above).")
def txns(args: StoreArgs, action: str, app: str | None, yes: bool) -> None:
    """List undecided sink transactions, or discard those of an abandoned query.

    \b
    quiver txns PATH list
    quiver txns PATH discard QUERY_ID --yes    (the streaming query id `list` shows)

    Discard only a query that will never run again from its checkpoint: a rerun of
    a discarded batch fails its commit instead of writing the batch.
    """
    if action == "list":
        if app is not None:
            raise click.UsageError(f"'list' takes no QUERY_ID (got {app!r})")
        doc = with_store(args, collect_pending)
        if args.as_json:
            emit_json(doc)
        else:
            click.echo(render_pending(doc))
            if "note" in doc:
                click.echo(f"note: {doc['note']}", err=True)
        return
    if app is None:
        raise click.UsageError("'discard' needs the QUERY_ID whose batches to discard")
    try:
        validate_name("transaction app id", app)
    except ConfigError as e:
        raise CliError(f"invalid QUERY_ID {app!r}: {e.allowed}") from e
    if not yes:
        raise CliError(
            f"discarding the pending batches of {app} drops their rows for good; if that "
            "query runs again from its old checkpoint its rerun fails instead. "
            "Add --yes to confirm."
        )
    doc = with_store(args, lambda store: discard(store, app))
    if args.as_json:
        emit_json(doc)
        return
    if not doc["versions"] and not doc["already_decided"]:
        click.echo(f"no pending transactions of {app}")
    for v in doc["versions"]:
        click.echo(f"discarded batch {v} of {app}")
    for v in doc["already_decided"]:
        click.echo(f"batch {v} of {app} was already decided: left as it is")
    for pid, seq in doc["sealed"]:
        click.echo(f"finalized idle partition {pid} (segment {seq})")


def collect_pending(store: QuiverStore) -> dict[str, Any]:
    """Pending transactions per partition, as the writers' heartbeats list them."""
    pending = []
    for pid, beat in sorted(store.heartbeats().items()):
        live = beat.get("live")
        held = set(beat.get("held_txns") or ())
        for txn_id, app, version, tag in beat.get("pending", []):
            pending.append(
                {
                    "partition": pid,
                    "txn": int(txn_id),
                    "app": str(app),
                    "version": int(version),
                    "tag": str(tag),
                    "decided": store.commits.get(str(app), int(version)) is not None,
                    "writer_live": bool(live),
                    "held": txn_id in held,
                }
            )
    doc: dict[str, Any] = {"schema": SCHEMA, "path": store.root, "pending": pending}
    note = local_wal_note(store)
    if note is not None:  # the heartbeats of other machines' writers are not here
        doc["note"] = note.removeprefix("note: ")
    return doc


def _lock_holder(store: QuiverStore, pid: str) -> str:
    """Who holds a partition for writing (its lease, or the LOCK file's JSON)."""
    return writer_holder(store, pid) or "a running process"


def render_pending(doc: dict[str, Any]) -> str:
    if not doc["pending"]:
        return "no pending transactions"
    rows = [
        [
            t["partition"],
            t["app"],
            t["version"],
            t["txn"],
            t["tag"],
            (
                "held: its staged object is damaged (restore it intact; removing it drops these rows)"
                if t.get("held")
                else "decided (applied on the next tick)"
                if t["decided"]
                else "undecided"
            ),
            "live" if t["writer_live"] else "stale",
        ]
        for t in doc["pending"]
    ]
    headers = ["PARTITION", "QUERY_ID", "BATCH", "TXN", "TASK", "STATE", "WRITER"]
    return render_table(headers, rows)


def discard(store: QuiverStore, app: str) -> dict[str, Any]:
    """Decide every pending batch of ``app`` with no winners; seal idle partitions.

    Refused (exit 1, nothing changed) when ``app`` is unknown (no pending transaction
    and no commit record: a typo must not report success) or when a partition holding
    one of its undecided transactions has a live writer: that writer's query may still
    commit them, and discarding under it would drop a batch it is about to publish.
    """
    pending = [t for t in collect_pending(store)["pending"] if t["app"] == app]
    if not pending and store.commits.latest_version(app) is None:
        known = sorted({t["app"] for t in collect_pending(store)["pending"]})
        raise CliError(
            f"unknown query id {app!r}: it has no pending transactions and no commit records; "
            f"queries with pending transactions: {', '.join(known) or 'none'}",
            EXIT_TROUBLE,
        )
    live = sorted(
        {
            t["partition"]
            for t in pending
            if not t["decided"] and writer_holder(store, t["partition"]) is not None
        }
    )
    if live:
        holders = "; ".join(f"{pid} held by {_lock_holder(store, pid)}" for pid in live)
        raise CliError(
            f"refusing to discard transactions of {app}: partition{'s' if len(live) > 1 else ''} "
            f"{', '.join(live)} {'have' if len(live) > 1 else 'has'} a live writer whose query "
            f"may still commit them ({holders}); stop that query first, or run `quiver txns "
            "PATH list` to see which batches are undecided",
            EXIT_TROUBLE,
        )
    versions = sorted({t["version"] for t in pending})
    done: list[int] = []
    before: list[int] = []
    for v in versions:
        (done if store.commit_txn(app, v, []) else before).append(v)
    sealed = store.finalize_idle_partitions() if done else []
    return {
        "schema": SCHEMA,
        "path": store.root,
        "action": "discarded",
        "app": app,
        "versions": done,
        "already_decided": before,
        "sealed": [list(s) for s in sealed],
    }
