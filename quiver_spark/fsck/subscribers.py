"""The subscriber registry: on a POSIX root its ack logs and CHECKPOINT (ARCHITECTURE.md
§13.5), on an object root its ack-log deltas and CHECKPOINT (§13.7); every
subscription record ``.sub`` (§13.8), and a record whose registration the ack log lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import format as fmt
from .. import layout
from ..errors import CorruptionError
from .report import FindingKind, FsckRun, Task


def subscriber_tasks(run: FsckRun) -> list[Task]:
    """The registry's checks (none on a store without one): its journal (the ack log
    and CHECKPOINT of the root's kind), every subscription record, and records whose
    registration the ack log lost."""
    if not run.store.has_registry():
        return []
    # the ack log the root's kind keeps says how it is stored
    tasks = _JOURNAL_TASKS[run.store.kind.journal.stored_as](run)
    for key in run.keys(layout.records_prefix()):
        if layout.is_subscriber_record(key):
            tasks.append((1, lambda key=key: _check_record(run, key)))  # type: ignore[misc]
    return tasks


def _file_journal_tasks(run: FsckRun) -> list[Task]:
    """A POSIX root's ack logs ``subscribers/acklog.<gen>`` and CHECKPOINT (§13.5), and
    the records whose registration they lost."""
    from ..subscribers import log as acklog

    sdir = os.path.join(run.store.root, layout.subscribers_dir())
    gens = acklog.list_generations(run.store.io, sdir)
    tasks: list[Task] = [(1, lambda: _check_checkpoint(run, sdir, gens))]
    for gen in gens:
        path = os.path.join(sdir, acklog.log_file_name(gen))
        size = os.path.getsize(path) if os.path.exists(path) else 1
        tasks.append((max(1, size), lambda path=path: _check_ack_log(run, path)))  # type: ignore[misc]
    tasks.append((1, lambda: _check_subscription_records(run)))
    return tasks


def _object_journal_tasks(run: FsckRun) -> list[Task]:
    """An object root's CHECKPOINT and deltas (§13.7), the records included."""
    return [(1, lambda: _check_object_registry(run))]


_JOURNAL_TASKS: dict[str, Callable[[FsckRun], list[Task]]] = {
    "acklog-files": _file_journal_tasks,
    "acklog-deltas": _object_journal_tasks,
}
"""The checks of each way an ack log is stored (``Journal.stored_as``)."""


def _check_object_registry(run: FsckRun) -> None:
    """An object root's ack log (§13.7): CHECKPOINT, then every delta above its
    ``log_gen`` present and whole (a damaged delta is a damaged ack-log record), then
    the subscription records against the registrations they replay to."""
    from ..subscribers import log as acklog
    from ..subscribers import records
    from ..subscribers.state import RegistryState

    shown = run.shown(layout.registry_checkpoint())
    state: RegistryState | None = RegistryState()
    first = 1
    try:
        body = fmt.decode_frame(shown, fmt.MAGIC_CHECKPOINT, run.read(layout.registry_checkpoint()))
        state = RegistryState.from_body(shown, body)
        first = int(body["log_gen"]) + 1
        run.report.checked["subscriber_files"] += 1
    except FileNotFoundError:
        pass
    except CorruptionError as e:
        run.report.checked["subscriber_files"] += 1
        run.corruption(FindingKind.ACKLOG, e)
        state = None
    except (KeyError, TypeError, ValueError) as e:
        run.report.checked["subscriber_files"] += 1
        run.problem(FindingKind.ACKLOG, shown, f"invalid checkpoint body: {e}")
        state = None
    deltas = run.keys(layout.ack_deltas_prefix())
    nums = sorted(n for k in deltas if (n := layout.parse_ack_delta(k)) is not None)
    lost = "the acknowledgements it held are lost (subscribers are delivered those segments again)"
    if state is not None and first == 1 and nums and nums[0] > 1:
        run.problem(
            FindingKind.ACKLOG,
            shown,
            f"missing while the ack-log deltas start at {nums[0]}: {lost}",
        )
        state = None
    above = [n for n in nums if n >= first]
    for n in range(first, max(above, default=first - 1) + 1):
        if n not in above:
            run.problem(
                FindingKind.ACKLOG,
                run.shown(layout.ack_delta(n)),
                f"missing: {lost}",
            )
    for n in above:
        key = layout.ack_delta(n)
        name = run.shown(key)
        try:
            gen, data, skipped = acklog.read_whole(name, run.read(key), salvage=True)
            if gen != n:
                raise CorruptionError(name, 8, f"delta header says generation {gen}")
            facts = acklog.decode_records(data)
        except FileNotFoundError:
            continue  # covered by a checkpoint written since, and deleted
        except CorruptionError as e:
            run.corruption(FindingKind.ACKLOG, e)
            state = None
            continue
        run.report.checked["subscriber_files"] += 1
        for off in skipped:
            run.problem(
                FindingKind.ACKLOG, name, "ack record crc mismatch or unknown kind", offset=off
            )
        if state is not None:
            state.apply(facts)
    if state is None:
        return  # the registrations are not known: the findings above say why
    for sub in records.unregistered(run.store.objects, list(state.by_name)):
        run.problem(
            FindingKind.SUBSCRIBERS, records.record_path(run.store.root, sub),
            records.unregistered_message(run.store.root, sub),
        )  # fmt: skip


def _check_subscription_records(run: FsckRun) -> None:
    """A subscriber whose record exists but whose registration the ack log lost."""
    from ..subscribers import SubscriberRegistry, records

    root, io = run.store.root, run.store.io
    try:
        names = SubscriberRegistry.read_only_subscribers(root, io=io)
    except (OSError, CorruptionError):
        return  # already reported by the checks of the files themselves
    for name in records.unregistered(run.store.objects, names):
        run.problem(
            FindingKind.SUBSCRIBERS, records.record_path(root, name),
            records.unregistered_message(root, name),
        )  # fmt: skip


def _check_record(run: FsckRun, key: str) -> None:
    """A subscription record (§13.8): the ack log stays the truth of registration and
    progress, so a damaged record is a warning; the consumer's next acknowledgement
    rewrites it, and expiry does not act on that subscriber meanwhile."""
    from ..subscribers.records import SubscriptionRecord

    path = run.shown(key)
    try:
        body = fmt.decode_frame(path, fmt.MAGIC_SUBSCRIPTION, run.read(key))
        SubscriptionRecord.from_body(path, body)
    except FileNotFoundError:
        return
    except OSError as e:
        run.warning(FindingKind.SUBSCRIBER_RECORD, path, f"cannot read: {e}")
        return
    except CorruptionError as e:
        run.warning(
            FindingKind.SUBSCRIBER_RECORD, e.path, f"{e.reason} (the ack log keeps its registration "
            "and progress; its consumer's next acknowledgement rewrites it, and expiry "
            "skips it meanwhile)", offset=e.offset,
        )  # fmt: skip
    run.report.checked["subscriber_records"] += 1


def _check_checkpoint(run: FsckRun, sdir: str, gens: list[int]) -> None:
    """CHECKPOINT and the chain of ack logs it starts (§13.5): the logs from its
    ``log_gen`` on must all be there, and without a checkpoint the first log is 1."""
    from ..subscribers import log as acklog
    from ..subscribers.state import RegistryState

    path = os.path.join(run.store.root, layout.registry_checkpoint())
    try:
        body = fmt.decode_frame(path, fmt.MAGIC_CHECKPOINT, run.store.io.read_file(path))
        RegistryState.from_body(path, body)
        first = int(body["log_gen"])
    except FileNotFoundError:
        if gens and gens[0] > 1:
            run.problem(
                FindingKind.SUBSCRIBERS, path, f"missing while the ack logs start at generation "
                f"{gens[0]}: the acknowledgements and deletions before it are lost "
                "(subscribers are delivered those segments again)",
            )  # fmt: skip
        return
    except CorruptionError as e:
        run.report.checked["subscriber_files"] += 1
        run.corruption(FindingKind.SUBSCRIBERS, e)
        return
    except (KeyError, TypeError, ValueError) as e:
        run.report.checked["subscriber_files"] += 1
        run.problem(FindingKind.SUBSCRIBERS, path, f"invalid checkpoint body: {e}")
        return
    run.report.checked["subscriber_files"] += 1
    now = acklog.list_generations(run.store.io, sdir)  # after the checkpoint: no race
    for gen in range(first, max([first, *now]) + 1):
        if gen not in now:
            run.problem(
                FindingKind.SUBSCRIBERS, os.path.join(sdir, acklog.log_file_name(gen)),
                "missing: the acknowledgements it held since the checkpoint are lost "
                "(subscribers are delivered those segments again)",
            )  # fmt: skip


def _check_ack_log(run: FsckRun, path: str) -> None:
    """Verify one ack log read-only: header, every record's chained CRC, decoding."""
    from ..subscribers import log as acklog

    io = run.store.io
    try:
        cursor = acklog.open_cursor(io, path)
        tail = acklog.read_tail(io, path, cursor, salvage=True)
        acklog.decode_records(tail.data)
    except FileNotFoundError:
        return  # compacted away by a checkpoint while we checked
    except CorruptionError as e:
        run.corruption(FindingKind.SUBSCRIBERS, e)
        return
    run.report.checked["subscriber_files"] += 1
    for off in tail.skipped:
        run.problem(
            FindingKind.SUBSCRIBERS, path, "ack record crc mismatch or unknown kind", offset=off
        )
    if tail.torn_bytes:
        run.warning(
            FindingKind.SUBSCRIBERS, path,
            f"torn tail of {tail.torn_bytes} bytes (left in place; the registry's next "
            "writer cuts it)", offset=tail.torn_offset,
        )  # fmt: skip
