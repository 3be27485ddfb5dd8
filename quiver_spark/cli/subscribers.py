"""``quiver subscribers PATH list|add NAME|remove NAME``.

Names match ``[A-Za-z0-9_.-]{1,64}`` (they reach paths and logs); anything else is a
usage error (exit 2) naming the value and what is allowed. Adding a name that is
registered, or removing one that is not, exits 1. ``add --create`` first makes the
store when PATH is missing or an empty directory (consumers registered before the
first write); without it a missing path is an error as everywhere else.

JSON schemas (``--json``)::

    list:   {"schema": "quiver.subscribers/1", "path": str,
             "subscribers": [<the subscriber objects of quiver.status/1>]}
    add:    {"schema": "quiver.subscribers/1", "path": str, "action": "added",
             "name": str, "start": "earliest"|"latest",
             "marks": {partition: int},      # high-water mark it starts from
             "reclaimed_before": null | {    # what retention deleted before it existed
                 "segments": int, "at_least": bool, "rows": null,  # rows not recorded
                 "partitions": {partition: {"segments": int, "highest_seq": int,
                                            "starts_at": int}}}}
    remove: {"schema": "quiver.subscribers/1", "path": str, "action": "removed",
             "name": str}
"""

from __future__ import annotations

import time

import click

from ..config import StoreConfig, validate_name
from ..errors import (
    CliError,
    ConfigError,
    QuiverError,
    StorageConfigError,
    StoreNotFoundError,
    SubscriberError,
)
from ..root_kind import root_kind
from ..segment import SegmentLocation
from ..store import QuiverStore
from ..subscribers import records
from .common import (
    StoreArgs,
    check_segments_reachable,
    emit_json,
    human_bytes,
    human_seconds,
    one_line,
    open_error,
    open_store,
    render_table,
    storage_error,
    store_arguments,
    store_config,
)
from .exits import EXIT_TROUBLE
from .registry import open_registry
from .status import collect_status, filter_options

SCHEMA = "quiver.subscribers/1"


@click.command("subscribers")
@store_arguments
@click.argument("action", type=click.Choice(["list", "add", "remove"]))
@click.argument("name", required=False)
@click.option(
    "--start",
    type=click.Choice(["earliest", "latest"]),
    default="earliest",
    show_default=True,
    help="For add: deliver every retained segment (earliest) or only new ones (latest).",
)
@click.option(
    "--create",
    is_flag=True,
    help="For add: create the store at PATH if it does not exist yet (register consumers "
    "before the first write, so nothing is reclaimed before they arrive).",
)
@filter_options
def subscribers(
    args: StoreArgs,
    action: str,
    name: str | None,
    start: str,
    create: bool,
    partition_globs: tuple[str, ...],
    subscriber_globs: tuple[str, ...],
) -> None:
    """List, add or remove the subscribers of the store at PATH.

    \b
    quiver subscribers PATH list [--subscriber NAME] [--partition GLOB]
    quiver subscribers PATH add NAME [--start earliest|latest] [--create]
    quiver subscribers PATH remove NAME

    NAME: 1 to 64 characters from [A-Za-z0-9_.-]. --subscriber and --partition
    repeat and take shell-style globs.
    """
    if action == "list":
        if name is not None:
            raise click.UsageError(f"'list' takes no NAME (got {name!r})")
    elif name is None:
        raise click.UsageError(f"'{action}' needs a subscriber NAME")
    else:
        try:
            validate_name("subscriber", name)
        except ConfigError as e:
            raise CliError(f"invalid subscriber name {name!r}: {e.allowed}") from e
    if create and action != "add":
        raise click.UsageError("--create goes with 'add' only")
    if (partition_globs or subscriber_globs) and action != "list":
        raise click.UsageError("--partition and --subscriber go with 'list' only")
    store = create_store(args) if create else open_store(args)
    try:
        if action == "list":
            _list(store, args, partition_globs, subscriber_globs)
        elif action == "add":
            assert name is not None
            _add(store, args, name, start)
        else:
            assert name is not None
            _remove(store, args, name)
    except CliError:  # the command's own report
        raise
    except SubscriberError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    except StorageConfigError as e:
        raise storage_error(e) from e
    except QuiverError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    finally:
        store.close()


def create_store(args: StoreArgs) -> QuiverStore:
    """Open the store at PATH, creating it when PATH is missing or an empty directory."""
    config = store_config(args)
    root = args.root
    try:
        new = root_kind(root).check_new_root(root, args.path)
    except StoreNotFoundError as e:
        raise CliError(str(e)) from e
    if new and config.segment.path:
        try:  # reach the segments location before the store is made
            location = SegmentLocation(
                config.segment.path, storage_options=args.storage_options or None
            )
            location.partitions()
        except Exception as e:
            raise CliError(
                f"segments location {config.segment.path} cannot be reached: "
                f"{type(e).__name__}: {one_line(e)}; nothing was created",
                EXIT_TROUBLE,
            ) from e
    return _open_created(args, config, root)


def _open_created(args: StoreArgs, config: StoreConfig, root: str) -> QuiverStore:
    try:
        store = QuiverStore.open(
            root, config, partition=None, create=True, background=False,
            storage_options=args.storage_options or None,
        )  # fmt: skip
    except ConfigError as e:
        raise open_error(args, config, e) from e
    except StorageConfigError as e:
        raise storage_error(e) from e
    except QuiverError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    check_segments_reachable(store, args.path)
    return store


def _list(
    store: QuiverStore,
    args: StoreArgs,
    partition_globs: tuple[str, ...] = (),
    subscriber_globs: tuple[str, ...] = (),
) -> None:
    doc = collect_status(
        store, time.time_ns(), partitions=partition_globs, subscribers=subscriber_globs
    )
    subs = doc["subscribers"]
    if args.as_json:
        emit_json({"schema": SCHEMA, "path": store.root, "subscribers": subs})
        return
    if not subs:
        click.echo("no subscribers")
        return
    rows = []
    for s in subs:
        marks = ", ".join(f"{r['partition']}:{r['hwm']}" for r in s["partitions"]) or "-"
        gaps = sum(r["gaps"] for r in s["partitions"])
        last = human_seconds(s["idle_seconds"]) + " ago" if s["last_ack_ns"] else "never"
        rows.append(
            [s["name"], marks, gaps, s["lag_segments"], human_bytes(s["lag_bytes"]),
             human_seconds(s["lag_seconds"]) if s["lag_segments"] else "-", last,
             "yes" if s["live"] else "no"]
        )  # fmt: skip
    headers = ["SUBSCRIBER", "HWM (partition:seq)", "GAPS", "LAG SEGS", "LAG BYTES", "LAG TIME",
               "LAST ACK", "LIVE"]  # fmt: skip
    click.echo(render_table(headers, rows))
    for s in subs:
        if s["pinning_idle"]:
            click.echo(
                f"WARNING: {s['name']} has not acknowledged for {human_seconds(s['idle_seconds'])}"
                f" and pins {human_bytes(s['lag_bytes'])}; `quiver subscribers {args.path} "
                f"remove {s['name']}` releases it (or set subscriber.expire_after)"
            )


def _add(store: QuiverStore, args: StoreArgs, name: str, start: str) -> None:
    from ..subscribers import StartPosition

    # from the listing alone: a damaged .meta elsewhere must not stop a registration
    retained = {p: store.segment_location.published_seqs(p) for p in store.partitions()}
    registry = open_registry(store, create=True)
    assert registry is not None
    registry.recorded = store.segment_location.reclaimed_totals
    try:
        late = registry.register(name, start=StartPosition(start), retained=retained)
        marks = {p: registry.hwm(name, p) for p in sorted(retained)}
        done = registry.done_count(name)
    finally:
        registry.close()
    # a fresh record: adding an expired name starts it over
    fresh = records.SubscriptionRecord(name, time.time_ns(), progress=done)
    records.write_record(store.objects, fresh)
    if args.as_json:
        emit_json({"schema": SCHEMA, "path": store.root, "action": "added", "name": name,
                   "start": start, "marks": marks,
                   "reclaimed_before": late.as_json() if late is not None else None})  # fmt: skip
    else:
        where = ", ".join(f"{p} after {h}" for p, h in marks.items()) or "no segments yet"
        click.echo(f"added subscriber {name} (start {start}: {where})")
        if late is not None:
            click.echo(f"WARNING: {late.line()}")


def _remove(store: QuiverStore, args: StoreArgs, name: str) -> None:
    registry = open_registry(store)
    rec = records.read_record_or_none(store.objects, name) if registry is not None else None
    if registry is None:
        raise SubscriberError(f"unknown subscriber {name!r}; registered: []")
    try:
        if name in registry.subscribers():
            registry.deregister(name)
        elif rec is None:  # neither registered nor recorded
            registry.deregister(name)  # raises, naming the registered ones
    finally:
        registry.close()
    records.remove_record(store.objects, name)
    if args.as_json:
        emit_json({"schema": SCHEMA, "path": store.root, "action": "removed", "name": name})
    else:
        click.echo(
            f"removed subscriber {name} (segments only it held are reclaimed by `quiver gc`)"
        )
