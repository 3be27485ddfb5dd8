"""Verify every file kind of a store without changing it (``quiver fsck``; ARCHITECTURE.md §5-§13).

Checked, in order: the STORE descriptor; POLICY and its copy ``POLICY.copy``; per
partition its STATE, HEARTBEAT, LOCK holder info (on this machine: an object root's
writers keep these on their own disks, which a note says) and every WAL file (scanned
read-only through a memory map: a torn tail is reported, never cut — the next
writer's recovery cuts it); every published segment's ``.meta`` and ``.arrow``
(size, CRC-32C, Arrow footer, schema, every batch decodable); each partition's
MANIFEST against what is published, and its LEASE (object roots); the quarantine mark
(and the quarantined segments, counted); every transaction commit record; the
subscriber registry (ack logs and checkpoint; an object root's deltas) and every
``.sub`` record; the advisory files ``readers/*.lock``, ``readers/*.lost.jsonl`` and
``metrics/*.prom``, and the consumer leases ``readers/*.lease``. Everything under the
root is read through its :class:`~quiver_spark.objects.ObjectStore` (``store.objects``),
so a POSIX root and an object root are checked alike; ``.objects.lock`` files are not
data and are passed over.
With ``quarantine`` each corrupt segment is moved to ``<segments>/<partition>/quarantine/``
(the partition's writer lock is taken for it; a partition with a live writer is
skipped and says so). The table of ARCHITECTURE.md "Damage and what it affects"
says, per kind, what a finding means and the command that repairs it.

A problem is damage that loses data or keeps a guarantee from holding until it is
repaired (STORE, POLICY, STATE, WAL, segments, commit records, ack log, checkpoint);
a warning is what a crash leaves and recovery repairs (a torn WAL or ack-log tail, an
unpublished segment file) or damage to a file nothing correct depends on (heartbeat,
lock holder info, quarantine mark, POLICY's copy, ``.sub`` records, lost logs,
metrics). :func:`check_store` returns an :class:`FsckReport`; ``quiver fsck`` only
renders it.

``Finding.kind`` is one of ``store``, ``policy``, ``policy_copy``, ``state``, ``wal``,
``wal_torn_tail``, ``segment``, ``segment_meta``, ``segment_orphan``, ``segment_pending``,
``heartbeat``,
``lock``, ``quarantine_mark``, ``commit``, ``subscribers``, ``subscriber_record``,
``reader_lock``, ``lost_log``, ``metrics``, ``manifest``, ``lease``, ``acklog`` (an object
root's ack-log deltas and CHECKPOINT), ``advisory``; ``action`` is ``"quarantined to <path>"``
or ``"not quarantined: <why>"`` when quarantining acted on the finding.

The package, one module per thing checked:

===================  ===============================================================
``report.py``        the finding kinds, :class:`Finding`, :class:`FsckReport`, and
                     :class:`~.report.FsckRun`, what every check shares
``control.py``       STORE, POLICY and its copy, MANIFESTs, leases
``partitions.py``    this machine's partition directories: STATE, HEARTBEAT, LOCK,
                     WAL files
``segments.py``      published segments, unpublished segment files, the quarantine
                     mark, quarantining
``transactions.py``  commit records, staged transactions (object roots)
``subscribers.py``   the ack logs, CHECKPOINT, subscription records
``advisory.py``      ``readers/*`` and ``metrics/*``
===================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable

from .. import layout
from ..store import QuiverStore
from . import advisory, control, partitions, segments, subscribers, transactions
from .report import CHECKED_KEYS, Finding, FindingKind, FsckReport, FsckRun, Task

__all__ = [
    "CHECKED_KEYS",
    "Finding",
    "FindingKind",
    "FsckReport",
    "StoreChecker",
    "Task",
    "check_store",
]


class StoreChecker:
    """Lists and runs the checks of one store (read-only unless quarantining)."""

    def __init__(self, store: QuiverStore, *, quarantine: bool = False) -> None:
        self.store = store
        self.quarantine = quarantine
        self._run = FsckRun(store, quarantine=quarantine)
        self.report = self._run.report

    def list_checks(self) -> list[Task]:
        """Every check as a weighted task; listing errors become findings at once."""
        run = self._run
        tasks: list[Task] = [
            (1, lambda: control.check_store_file(run)),
            (1, lambda: control.check_policy(run)),
        ]
        for pid in partitions.wal_partitions(run):
            tasks.extend(partitions.partition_tasks(run, pid))
        wal_note = self.store.kind.wal_note(self.store.wal_root)
        if wal_note is not None:  # writers on other machines keep their WALs there
            run.note(FindingKind.WAL, self.store.wal_root, wal_note.removeprefix("note: "))
        segment_partitions = segments.segment_partitions(run)
        for pid in segment_partitions:
            tasks.extend(segments.segment_tasks(run, pid))
        for pid in sorted(set(segment_partitions) | set(control.control_partitions(run))):
            # a root without writer leases, GONE copies or staged transactions (POSIX)
            # has none of these objects: their checks find nothing there
            key = layout.writer_lease(pid)
            tasks.append((1, lambda pid=pid: control.check_manifest(run, pid)))  # type: ignore[misc]
            tasks.append((1, lambda key=key, pid=pid: control.check_lease(run, key, pid)))  # type: ignore[misc]
            tasks.append((1, lambda pid=pid: control.check_gone(run, pid)))  # type: ignore[misc]
        tasks.append((1, lambda: segments.check_quarantine_mark(run)))
        tasks.extend(transactions.staged_tasks(run))
        tasks.extend(transactions.commit_tasks(run))
        tasks.extend(subscribers.subscriber_tasks(run))
        tasks.extend(advisory.advisory_tasks(run))
        return tasks

    def run(self, tasks: list[Task], progress: Callable[[int], None] | None = None) -> FsckReport:
        """Run ``tasks`` in order, calling ``progress(weight)`` after each."""
        for weight, work in tasks:
            work()
            if progress is not None:
                progress(weight)
        return self.report


def check_store(
    store: QuiverStore,
    *,
    quarantine: bool = False,
    progress: Callable[[int], None] | None = None,
) -> FsckReport:
    """Verify every file of ``store`` (see the module docstring) and report what was found.

    ``progress(weight)`` is called after each unit of work; the weights (mostly bytes)
    sum to that of :meth:`StoreChecker.list_checks`. With ``quarantine`` corrupt segments are
    moved aside; nothing else is ever changed.
    """
    checker = StoreChecker(store, quarantine=quarantine)
    return checker.run(checker.list_checks(), progress)
