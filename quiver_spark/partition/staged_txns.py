"""A transaction that survives its machine on an object root (ARCHITECTURE.md §10.2).

A writer whose WAL is on its own machine's disk stages each transaction in the bucket
before it is reported (:func:`stage_txn`); when the machine is lost, any process seals
its committed staged rows once the partition's writer LEASE is free
(:class:`LostSealer`). :class:`~quiver_spark.root_kind.ObjectRoot` delegates both here;
a POSIX root stages nothing (a lost process's WAL is on the shared disk).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from .. import layout, staging
from ..commits import CommitLog
from ..config import NAME_RE, SegmentConfig
from ..control.lease import PURPOSE_SEALER, Lease
from ..control.manifest_store import ManifestStore
from ..errors import (
    CorruptionError,
    InvalidArgumentError,
    LeaseLostError,
    LockedError,
    ManifestUnreadableError,
    QuiverError,
)
from ..objects import ObjectStore
from ..segment import SegmentLocation
from .staged_seal import seal_one
from .writer import PartitionWriter

log = logging.getLogger(__name__)


def stage_txn(
    objects: ObjectStore,
    writer: PartitionWriter,
    txn_id: int,
    batches: Sequence[pa.RecordBatch] | None,
) -> int:
    """Make ``txn_id``'s rows survive this machine: write them to the bucket as a staged
    object, then confirm the writer still holds its lease; the bytes written."""
    app, version, held = writer.pending_txn(txn_id)
    own = [b for b in held if b.num_rows]
    rows = own if batches is None else [b for b in batches if b.num_rows]
    if batches is not None and rows:  # its own rows, as the WAL holds them
        if own:  # ValueError naming the columns of another type or name
            staging.one_schema(writer.pid, txn_id, [own[0], *rows])
        if sum(b.num_rows for b in rows) != sum(b.num_rows for b in own):
            given, holds = sum(b.num_rows for b in rows), sum(b.num_rows for b in own)
            raise InvalidArgumentError(
                "batches",
                given,
                f"the transaction's own {holds} rows, or none",
                f"stage_txn: {given} rows given for transaction {txn_id} of partition "
                f"{writer.pid}, which holds {holds}; pass its own rows, or none",
            )
    if not rows:
        return 0
    try:
        n = staging.stage(
            objects, writer.pid, txn_id, app, version, rows, writer.stage_stamp(txn_id)
        )
    except FileExistsError:
        writer.note_foreign(txn_id)  # another incarnation's: resolved, never floored
        raise
    try:
        # one GET: the object landed before any takeover, so the partition's next
        # holder lists it at its open; a fenced writer's task fails instead (§10.2)
        writer.confirm_lease()
    except LeaseLostError:
        # the key holds this writer's own bytes (stage() returned): never committed,
        # so garbage; another incarnation's object under the same id is never ours
        try:
            staging.drop_staged(objects, writer.pid, [txn_id])
        except OSError as e:
            log.warning("quiver.staged.drop_failed partition=%s txn=%d: %s", writer.pid, txn_id, e)
        raise
    return n


def staged_ids(objects: ObjectStore) -> dict[str, list[int]]:
    """The staged transaction ids of every partition (one listing of ``partitions/``)."""
    out: dict[str, list[int]] = {}
    for info in objects.list(layout.partitions_prefix()):
        staged = layout.parse_staged_key(info.key)
        if staged is None:
            continue
        txn_id = staging.staged_id(staged[1])
        if txn_id is not None:
            out.setdefault(staged[0], []).append(txn_id)
    return {pid: sorted(ids) for pid, ids in out.items()}


@dataclass(frozen=True)
class LostSealer:
    """Seals a lost machine's committed staged rows, partition by partition, under
    each one's free writer LEASE (taken by ``claim``: pid, purpose, min epoch)."""

    objects: ObjectStore
    commits: CommitLog
    segments: SegmentLocation
    segment: SegmentConfig
    manifests: ManifestStore
    claim: Callable[[str, str, int], Lease]

    def seal_lost(self, skip: set[str], failures: dict[str, str]) -> list[tuple[str, int]]:
        """Seal the staged transactions of partitions whose writer lease is free."""
        sealed: list[tuple[str, int]] = []
        for pid, ids in sorted(staged_ids(self.objects).items()):
            if pid in skip or not NAME_RE.fullmatch(pid):
                continue
            try:
                sealed += self.seal_partition(pid, ids, failures)
            except LockedError:
                continue  # its writer lives (or another observer is sealing it)
            except (QuiverError, OSError) as e:  # one partition must not stop the rest
                log.error("quiver.seal_staged.failed partition=%s: %s", pid, e)
                failures[pid] = str(e)
        return sealed

    def seal_partition(
        self, pid: str, ids: list[int], failures: dict[str, str]
    ) -> list[tuple[str, int]]:
        """Take ``pid``'s free writer lease, publish its committed staged transactions
        not sealed yet (the MANIFEST step is the publication and fences the lost
        writer), drop those sealed or decided without them, leave undecided ones,
        release the lease. Raises LeaseHeldError while a writer holds it."""
        try:
            current = self.manifests.read(pid)
        except CorruptionError as e:  # its recorded transactions are unknown: never guess
            raise ManifestUnreadableError(
                pid,
                e.path,
                e.reason,
                f"partition {pid}: staged transactions left unsealed, its MANIFEST cannot "
                f"be read ({e}); repair it (the partition's next writer rewrites it)",
            ) from e
        lease = self.claim(pid, PURPOSE_SEALER, current.epoch if current is not None else 0)
        sealed: list[tuple[str, int]] = []
        garbage: list[int] = []
        try:
            for txn_id in ids:
                if current is not None and current.seals(txn_id):
                    garbage.append(txn_id)
                    continue
                done = seal_one(
                    self.objects,
                    self.commits,
                    self.segments,
                    self.segment,
                    pid,
                    txn_id,
                    lease=lease,
                    check_lease=lease.check_held,
                    log=log,
                )
                if done.error is not None:
                    failures[pid] = str(done.error)
                if done.garbage:
                    garbage.append(txn_id)
                if done.meta is not None:
                    sealed.append((pid, done.meta.seq))
            try:
                staging.drop_staged(self.objects, pid, garbage)
            except OSError as e:  # garbage: the next pass removes it
                log.warning("quiver.staged.drop_failed partition=%s: %s", pid, e)
        finally:
            self.manifests.unclaim(pid)
            lease.release()
        return sealed
