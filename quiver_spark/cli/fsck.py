"""``quiver fsck PATH``: verify every file kind of a store without changing it.

What is checked, and how, lives in :mod:`quiver_spark.fsck`; this module parses
the arguments, shows a progress bar and renders the report (a human listing or the
JSON document below). ``--quarantine`` moves each corrupt segment to
``<segments>/<partition>/quarantine/``.

Exit 0 when no problem was found, 1 otherwise (even when every corrupt segment was
quarantined: data was lost; a second run then exits 0). A problem is damage that
loses data or keeps a guarantee from holding until repaired (STORE, POLICY, STATE,
WAL, segments, commit records, ack log, checkpoint). Warnings are what a crash leaves
and recovery repairs (a torn WAL tail, an unpublished segment file) and damage to an
advisory file nothing correct depends on (heartbeat, lock holder info, quarantine
mark, POLICY's copy, ``.sub`` records, lost logs, metrics); they do not make the store
unhealthy unless ``--strict``. Each finding names the file and, where it has one, the
command that repairs it (ARCHITECTURE.md, "Damage and what it affects").

JSON schema (``--json``; ``"schema": "quiver.fsck/1"``)::

    {
      "schema": "quiver.fsck/1", "path": str, "healthy": bool,
      "checked": {"store": int, "policy": int, "states": int, "wal_files": int,
                  "wal_records": int, "wal_bytes": int, "segments": int,
                  "segment_bytes": int, "quarantined_segments": int, "commits": int,
                  "subscriber_files": int, "subscriber_records": int,
                  "advisory_files": int, "manifests": int, "leases": int},
      "problems": [Finding], "warnings": [Finding], "quarantined": int,
      "notes": [Finding]     # neither problem nor warning: a released or expired
    }                        # lease, what cannot be seen from here
    Finding = {"kind": str, "file": str, "offset": int|null, "reason": str,
               "partition": str|null, "seq": int|null, "action": str|null}

``kind`` is one of ``store``, ``policy``, ``policy_copy``, ``state``, ``wal``,
``wal_torn_tail``, ``segment``, ``segment_meta``, ``segment_orphan``, ``heartbeat``,
``lock``, ``quarantine_mark``, ``commit``, ``subscribers``, ``subscriber_record``,
``reader_lock``, ``lost_log``, ``metrics``, ``manifest``, ``lease``, ``acklog`` (an object
root's ack-log deltas and CHECKPOINT), ``advisory``; ``action`` is ``"quarantined to <path>"``
or ``"not quarantined: <why>"`` when ``--quarantine`` acted on the finding.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import click

from ..errors import (
    CliError,
    ConfigError,
    CorruptionError,
    QuiverError,
    RetriesExhausted,
    StorageConfigError,
)
from ..fsck import FsckReport, StoreChecker
from ..store import QuiverStore
from .common import (
    StoreArgs,
    check_segments_reachable,
    check_store_path,
    emit_json,
    human_bytes,
    open_error,
    stderr_is_tty,
    storage_error,
    store_arguments,
    store_config,
)
from .exits import EXIT_OK, EXIT_TROUBLE, EXIT_USAGE

SCHEMA = "quiver.fsck/1"


def open_for_fsck(args: StoreArgs) -> QuiverStore:
    """A store handle even when STORE itself is damaged (its check reports that)."""
    config = store_config(args)
    root = check_store_path(args.path)
    options = args.storage_options or None
    try:
        store = QuiverStore.open(
            root, config, partition=None, create=False, background=False,
            storage_options=options,
        )  # fmt: skip
    except CorruptionError:
        from ..fs import DEFAULT_IO
        from ..objects import open_objects

        objects = open_objects(root, options, DEFAULT_IO)
        return QuiverStore(root, config, DEFAULT_IO, {}, options, objects)
    except ConfigError as e:
        raise open_error(args, config, e) from e
    except StorageConfigError as e:
        raise storage_error(e) from e
    except QuiverError as e:  # no STORE on an object root, a bad storage option...
        if isinstance(e, RetriesExhausted):  # the storage still failing: no usage error
            raise
        raise CliError(str(e), EXIT_USAGE) from e
    check_segments_reachable(store, args.path)
    return store


@contextlib.contextmanager
def progress_bar(total: int, show: bool) -> Iterator[Callable[[int], None] | None]:
    """A click progress bar on stderr measured in bytes, or nothing when hidden.

    Click draws the bar only on a terminal; elsewhere a forced ``--progress``
    prints just its label.
    """
    if not show:
        yield None
        return
    with click.progressbar(
        length=max(1, total), label="verifying", file=sys.stderr, show_pos=False,
        show_percent=True,
    ) as bar:  # fmt: skip
        yield bar.update


@click.command("fsck")
@store_arguments
@click.option(
    "--quarantine", is_flag=True, help="Move corrupt segments aside (counted in the report)."
)
@click.option("--strict", is_flag=True, help="Count warnings (torn WAL tails...) as problems.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar on stderr (default: when stderr is a terminal and not --json).",
)
def fsck(args: StoreArgs, quarantine: bool, strict: bool, progress: bool | None) -> None:
    """Verify every file of the store at PATH; exit 0 if healthy, 1 if not.

    Checks STORE, POLICY, each partition's STATE, HEARTBEAT and WAL files
    (read-only: a torn tail is reported, never cut), MANIFEST and LEASE, every
    segment's metadata and data, commit records, the subscribers' ack logs,
    checkpoint and records, and the advisory files (locks, lost logs, metrics).
    PATH may be an object-store URL (s3://...; -S for the client's settings). Each finding names the file,
    byte offset and the repair. Damage to an advisory file is a warning (exit 0
    unless --strict). --quarantine moves corrupt segments to
    <partition>/quarantine/ under the segments location.
    """
    store = open_for_fsck(args)
    try:
        checker = StoreChecker(store, quarantine=quarantine)
        tasks = checker.list_checks()
        show = progress if progress is not None else (not args.as_json and stderr_is_tty())
        with progress_bar(sum(w for w, _ in tasks), show) as update:
            report = checker.run(tasks, update)
    finally:
        store.close()
    if args.as_json:
        emit_json(fsck_json(report, strict))
    else:
        click.echo(render_fsck(report, strict))
    raise SystemExit(EXIT_OK if report.healthy(strict) else EXIT_TROUBLE)


def fsck_json(report: FsckReport, strict: bool) -> dict[str, Any]:
    """The ``--json`` document of an :class:`FsckReport` (schema in the module docstring)."""
    return {
        "schema": SCHEMA,
        "path": report.path,
        "healthy": report.healthy(strict),
        "checked": dict(report.checked),
        "problems": [asdict(f) for f in report.problems],
        "warnings": [asdict(f) for f in report.warnings],
        "quarantined": report.quarantined,
        "notes": [asdict(f) for f in report.notes],
    }


def render_fsck(report: FsckReport, strict: bool) -> str:
    """The human view of an :class:`FsckReport`."""
    c = report.checked
    out = [
        f"fsck {report.path}",
        f"  checked: STORE, POLICY, {c['states']} partition states, {c['wal_files']} WAL files "
        f"({c['wal_records']} records, {human_bytes(c['wal_bytes'])}), {c['segments']} segments "
        f"({human_bytes(c['segment_bytes'])}), {c['commits']} commit records, "
        f"{c['subscriber_files']} subscriber files, {c['subscriber_records']} subscriber "
        f"records, {c['advisory_files']} advisory files",
    ]
    for f in report.problems:
        out.append(f"PROBLEM {f.line()}")
    for f in report.warnings:
        out.append(f"WARNING {f.line()}")
    for f in report.notes:
        out.append(f"note: {f.line()}")
    if report.quarantined:
        out.append(f"quarantined {report.quarantined} segment(s)")
    verdict = "healthy" if report.healthy(strict) else "UNHEALTHY"
    out.append(f"{verdict}: {len(report.problems)} problem(s), {len(report.warnings)} warning(s)")
    return "\n".join(out)
