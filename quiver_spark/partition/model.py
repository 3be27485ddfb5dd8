"""The in-memory pieces of a partition writer's state: the open segment, a pending
transaction, and what a recovery found (:class:`RecoveryReport`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pyarrow as pa

from ..config import validate_name
from ..control.lease import Lease


@dataclass
class RecoveryReport:
    """What opening a partition found and did."""

    partition: str
    wal_files: int = 0
    records_scanned: int = 0
    records_replayed: int = 0
    rows_replayed: int = 0
    torn_tails: list[tuple[str, int, int]] = field(default_factory=list)
    salvaged_skips: int = 0
    removed_files: list[str] = field(default_factory=list)
    republished_seq: int | None = None
    pending_txns: int = 0
    discarded_txns: int = 0
    sealed_elsewhere: int = 0
    """Object root: transactions of its WAL another holder had sealed (skipped)."""
    held_txns: int = 0
    """Object root: pending transactions held on a damaged staged object (§10.2),
    counted in ``pending_txns`` too."""
    next_segment_seq: int = 1
    duration_s: float = 0.0

    def summary(self) -> str:
        torn = sum(n for _, _, n in self.torn_tails)
        return (
            f"partition {self.partition}: {self.wal_files} wal files, "
            f"{self.records_replayed} records ({self.rows_replayed} rows) replayed into the open "
            f"segment, torn tail cut: {torn} bytes, {len(self.removed_files)} stale files removed, "
            f"{self.pending_txns} transactions pending, next segment {self.next_segment_seq}, "
            f"{self.duration_s * 1000:.1f} ms"
        )


@dataclass
class Txn:
    """A transaction whose commit record has not decided it yet, with its records."""

    txn_id: int
    app: str
    version: int
    tag: str
    records: list[tuple[int, int, pa.RecordBatch]] = field(default_factory=list)
    # monotonic time of the first record: the data's age counts from its append, not
    # from the commit that admits it, so visibility stays within max_open_duration
    first_mono: float | None = None


HEARTBEAT_PENDING = 256
"""Pending transactions a heartbeat lists at most (oldest first)."""
RESOLVE_GRACE_S = 5.0
"""How long after its first record a pending transaction's commit record is looked for
at every maintenance tick (a micro-batch's decision comes within it)."""
RESOLVE_CAP_S = 30.0
"""The longest wait between two looks for the commit record of a transaction still
pending after :data:`RESOLVE_GRACE_S` on an object root, or at a staged transaction of
another incarnation that is undecided or damaged (each look is a request)."""


class OpenSegment:
    """The rows admitted since the last finalize, in WAL order (the open segment)."""

    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.seqs: list[int] = []
        self.txns: list[int] = []
        """Transactions whose rows it holds (recorded in the MANIFEST on object roots)."""
        self.rows = 0
        self.nbytes = 0
        self.min_ns = 0
        self.max_ns = 0
        self.opened_mono = 0.0

    def add(
        self, seq: int, ingestion_ns: int, batch: pa.RecordBatch, since: float | None = None
    ) -> None:
        if not self.batches:
            self.opened_mono = time.monotonic()
            self.min_ns = self.max_ns = ingestion_ns
        if since is not None:  # the age of the oldest data, not of the admission
            self.opened_mono = min(self.opened_mono, since)
        self.batches.append(batch)
        self.seqs.append(seq)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        self.min_ns = min(self.min_ns, ingestion_ns)
        self.max_ns = max(self.max_ns, ingestion_ns)

    @property
    def schema(self) -> pa.Schema | None:
        return self.batches[0].schema if self.batches else None

    def __bool__(self) -> bool:
        return bool(self.batches)


def partition_dir(wal_root: str, pid: str) -> str:
    return os.path.join(wal_root, validate_name("partition", pid))


class NoLease:
    """What a POSIX root's writer holds besides its WAL's flock: nothing. The flock
    decides who writes (§8.2), so there is nothing to confirm, renew or release, and
    the writer never seals for a gone one under it."""

    epoch = 0
    sealer = False

    def confirm(self) -> None:
        return None

    def check_held(self) -> None:
        return None

    def release(self) -> None:
        return None


NO_LEASE = NoLease()

WriterLease = Lease | NoLease
"""What a partition's writer holds besides its WAL's flock, as its root's kind hands it."""
