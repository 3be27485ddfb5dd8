"""What a failed I/O left a partition writer with, in a process that goes on (§9.4).

After a failure that may leave its memory other than what recovery would rebuild
from disk, a writer's state is *discarded* and its next call recovers in place
(ARCHITECTURE.md §9.4). :class:`FailureState` keeps what that takes: the failure
that discarded the state, a WAL failure no caller was told of yet, and, after a
failed WAL write or fsync, the *cut* (the last seq both fsynced and acknowledged) with
the records to write again past it (steps 1-3, :meth:`FailureState.settle`). The
writer decides when to recover; this module says what a failure leaves to do.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from .. import format as fmt
from ..config import WalConfig
from ..errors import WalFailedError
from ..fs import FileIO
from ..wal import WalCarry, WalWriter, list_wal_files, wal_limits
from .recovery import read_state

log = logging.getLogger(__name__)


class FailureState:
    """The failures a partition writer carries until a recovery succeeds (§9.4)."""

    def __init__(self, pid: str) -> None:
        self.pid = pid
        self.broken: BaseException | None = None
        """The failure that discarded the in-memory state: the next call recovers."""
        self.unreported_wal: BaseException | None = None
        """A WAL failure no caller of append/flush/finalize/begin_txn has seen yet (the
        background flusher's, or one a maintenance tick met): raised once to the next
        such call, so no later flush acknowledges what it left undurable."""
        self.seal_on_recovery = False
        """Set by a WAL failure, cleared once a recovery sealed what it replayed."""
        self.drop_from: int | None = None
        """First seq of the call whose WAL write or fsync raised: nothing of it is kept."""
        self.cut: tuple[int, list[WalCarry]] | None = None
        """A WAL failure's cut and the records to write again past it, until both are
        durable (kept across failed attempts of the recovery)."""
        self.cut_settled = False
        """The cut is durable and its records written again (kept until a recovery
        succeeds)."""

    def poison(self, e: BaseException, wal: WalWriter) -> None:
        """Discard the in-memory state after ``e``: the next call recovers from disk.

        Used wherever a failure may leave memory other than what recovery would
        rebuild (a STATE or ``.meta`` write whose outcome on disk is unknown, an
        admission cut short, a failed WAL instance, a WAL deletion cut short).
        """
        if self.broken is None:
            self.broken = e
            log.error(
                "quiver.writer.discarded partition=%s error=%s: the next call recovers "
                "the partition from disk",
                self.pid,
                e,
            )
        if isinstance(e, WalFailedError) or wal.failed:
            self.unreported_wal = self.unreported_wal or e
            self.seal_on_recovery = True

    def reported(self, e: BaseException) -> None:
        """``e`` reaches a caller of append/flush/finalize/begin_txn: a WAL failure
        among its causes has been reported."""
        if isinstance(e, WalFailedError):
            self.unreported_wal = None

    def forget_unreported(self) -> None:
        """The WAL failure no caller was told of is being raised to one now (or was
        raised in its stead)."""
        self.unreported_wal = None

    def keep_unreported(self, e: BaseException | None) -> None:
        """A maintenance tick recovered: the report of WAL failure ``e`` still waits for
        a caller."""
        self.unreported_wal = self.unreported_wal or e

    def close_failed(self, e: BaseException) -> None:
        """Closing the WAL writer before a recovery raised ``e`` (its last flush): no
        caller was told, and the next recovery seals what it replays."""
        self.unreported_wal = e
        self.seal_on_recovery = True

    def recovery_failed(self, e: BaseException) -> None:
        """A recovery in place failed with ``e``: the state stays discarded."""
        self.broken = e

    def failed_call(self, first: int) -> None:
        """A call whose records start at seq ``first`` met a WAL failure: none is kept."""
        if self.drop_from is None:
            self.drop_from = first

    def recovered(self) -> None:
        """A recovery succeeded: nothing is discarded, pending or cut any more."""
        self.broken = None
        self.unreported_wal = None
        self.seal_on_recovery = False
        self.cut, self.cut_settled = None, False

    def settle(
        self, wal: WalWriter, wal_dir: str, io: FileIO, state_path: str, config: WalConfig
    ) -> None:
        """After a failed WAL write or fsync: cut the failed file, keep the rest (§9.4).

        The cut is the last seq both fsynced and acknowledged: the failed writer's
        ``durable_seq``, lowered to just before the first record of a call that raised
        (all of an append is one unit, a table included). No record after the cut was
        ever acknowledged and none may ever be read: the files that start after it are
        deleted, then STATE's ``wal_limit`` ends the file that holds the cut there,
        before anything else is written. Records after the cut that a call which
        returned wrote (not fsynced: the failed file may not hold them durably) are
        written again from memory, with the same seqs, into a new file that starts
        right after the cut, and fsynced there; recovery reads them back. A failure
        midway keeps the cut and the records for the next attempt; so does a recovery
        that fails after the cut is settled (``wal`` may still be the failed writer
        then, whose ``durable_seq`` alone knows nothing of the call that raised), until
        :meth:`recovered`.
        """
        if self.cut_settled:
            return
        if self.cut is None:
            if not wal.failed:
                return
            stop = self.drop_from
            cut = wal.durable_seq if stop is None else min(wal.durable_seq, stop - 1)
            carry = [r for r in wal.unsynced() if r.seq > cut and (stop is None or r.seq < stop)]
            self.cut = (cut, carry)
            self.drop_from = None
        cut, carry = self.cut
        files = list_wal_files(wal_dir, io)
        doomed = [f.path for f in files if f.first_seq > cut]
        if doomed:
            io.durable_unlink(doomed)
        kept = [f.first_seq for f in files if f.first_seq <= cut]
        if kept:
            state = read_state(io, state_path)  # from disk: the state in memory was discarded
            limits = {k: v for k, v in wal_limits(state_path, state).items() if k in kept}
            limits[kept[-1]] = min(limits.get(kept[-1], cut), cut)
            state["wal_limit"] = sorted([k, v] for k, v in limits.items())
            io.atomic_write(state_path, fmt.encode_frame(fmt.MAGIC_STATE, state))
        if carry:
            w = WalWriter(
                wal_dir,
                replace(config, flush_interval_s=0),
                next_record_seq=cut + 1,
                io=io,
            )
            try:
                w.rewrite(carry)
                w.flush()
            finally:
                w.close()
            log.warning(
                "quiver.wal.rewritten partition=%s records=%d seqs=%d..%d",
                self.pid,
                len(carry),
                carry[0].seq,
                carry[-1].seq,
            )
        self.cut_settled = True

    def settle_on_close(
        self, wal: WalWriter, wal_dir: str, io: FileIO, state_path: str, config: WalConfig
    ) -> WalFailedError | None:
        """Settle a failed WAL before the lock is released; the error to raise if not.

        Runs after the WAL writer is closed (a failed one closes without another
        fsync). Without the cut the next open reads the failed file whole, records
        of the call that raised included, which only a crash may leave.
        """
        if self.cut is None and not wal.failed:
            return None
        try:
            self.settle(wal, wal_dir, io, state_path, config)
        except Exception as e:
            cut = self.cut[0] if self.cut is not None else wal.durable_seq
            err = WalFailedError(
                getattr(e, "errno", None) or 0,
                f"partition {self.pid}: close could not cut its failed wal at seq {cut} ({e}); "
                f"as after a crash, the next open may read back or lose records after seq {cut} "
                "(none was acknowledged); free space or fix wal.path before reopening",
            )
            err.__cause__ = e
            log.error("quiver.writer.close_unsettled partition=%s: %s", self.pid, err)
            return err
        return None
