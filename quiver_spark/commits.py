"""Transaction commit records: the single, atomic commit decision of a transaction.

A transaction is identified by ``(app, version)`` (like Delta's txnAppId/txnVersion;
the Spark sink uses the streaming query id and the batch id). Writers append data
records tagged with a per-partition transaction id; the committer writes one commit
record naming the winning ``(partition, txn_id)`` pairs. A partition's finalizer
makes only winners' records visible and discards every other transaction of the
same ``(app, version)``. Writing the commit record is the only commit step, so a
crash leaves either no decision (the batch is retried) or the whole decision.
See ARCHITECTURE.md §9.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from . import format as fmt
from .config import validate_name
from .errors import CorruptionError
from .fs import DEFAULT_IO, FileIO

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitRecord:
    """A durable commit decision."""

    app: str
    version: int
    winners: frozenset[tuple[str, int]]
    committed_ns: int
    rows: int


class CommitLog:
    """The ``commits/`` directory of a store root."""

    def __init__(self, root: str, io: FileIO = DEFAULT_IO) -> None:
        self.dir = os.path.join(root, fmt.COMMITS_DIR)
        self.io = io
        # decisions this instance has made durable (their names fsynced): only these
        # are ever returned without reading and syncing the name again
        self._cache: dict[tuple[str, int], CommitRecord] = {}
        # apps whose directory's own entry (and ``commits/``'s) this instance has synced
        self._durable_dirs: set[str] = set()

    def path(self, app: str, version: int) -> str:
        validate_name("transaction app id", app)
        if not isinstance(version, int) or version < 0:
            raise ValueError(f"transaction version must be a non-negative integer, got {version!r}")
        return os.path.join(self.dir, app, f"{version:020d}.commit")

    def commit(
        self, app: str, version: int, winners: Iterable[tuple[str, int]], rows: int = 0
    ) -> bool:
        """Record the decision; return False when ``(app, version)`` was already committed.

        Idempotent: a second call for the same transaction changes nothing (the first
        decision stands, as a rerun batch must not publish a second copy). The record
        is created exclusively (:meth:`FileIO.create_exclusive`), so of two committers
        racing on one ``(app, version)`` exactly one writes its decision and gets True;
        the other gets False and :meth:`get` returns the winner's decision.

        Either answer is given only once the decision is durable (ARCHITECTURE.md §6.4):
        a call that raised left the decision unknown, and its retry that finds the name
        (left by the failed call, in the page cache) makes it durable before answering
        "already decided".
        """
        if self.get(app, version) is not None:
            log.info("quiver.txn.commit_replayed app=%s version=%d", app, version)
            return False
        path = self.path(app, version)
        self.io.mkdir(os.path.dirname(path))
        pairs = sorted((str(p), int(t)) for p, t in winners)
        winners_list = [[p, t] for p, t in pairs]
        committed_ns = time.time_ns()
        body = {
            "app": app,
            "version": version,
            "winners": winners_list,
            "committed_ns": committed_ns,
            "rows": int(rows),
        }
        if not self.io.create_exclusive(path, fmt.encode_frame(fmt.MAGIC_COMMIT, body)):
            decided = self.get(app, version)
            log.info(
                "quiver.txn.commit_lost_race app=%s version=%d winners=%d",
                app,
                version,
                len(decided.winners) if decided else -1,
            )
            return False
        # create_exclusive synced the record's directory; its ancestors' entries (made
        # by a mkdir whose parent fsync may have failed earlier) too before reporting
        self._sync_ancestors(app)
        self._cache[(app, version)] = CommitRecord(
            app, version, frozenset(pairs), committed_ns, int(rows)
        )
        log.info("quiver.txn.commit app=%s version=%d winners=%d", app, version, len(winners_list))
        return True

    def get(self, app: str, version: int) -> CommitRecord | None:
        """The durable decision for ``(app, version)``, or None while undecided.

        A name found on disk may exist only in the page cache (its creator failed
        before or in the directory fsync, in this process or in one that is gone): it
        is made durable (directory fsyncs) before it is returned, so nobody acts on a
        decision that a power loss could take back. A failure to do so raises
        ``OSError``; the next call tries again.
        """
        key = (app, version)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        path = self.path(app, version)
        try:
            raw = self.io.read_file(path)
        except FileNotFoundError:
            return None
        body = fmt.decode_frame(path, fmt.MAGIC_COMMIT, raw)
        try:
            rec = CommitRecord(
                app=str(body["app"]),
                version=int(body["version"]),
                winners=frozenset((str(p), int(t)) for p, t in body["winners"]),
                committed_ns=int(body["committed_ns"]),
                rows=int(body.get("rows", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"bad commit record: {e}") from e
        self._make_durable(app, version)
        self._cache[key] = rec
        return rec

    def _make_durable(self, app: str, version: int) -> None:
        """Make the name of an existing record durable: fsync its directory (a new fd).

        The record's content needs nothing: a name is only ever linked to a temporary
        file whose fsync succeeded (§6.4), so its bytes are durable whenever its name
        is; only the directory entries may still be volatile.
        """
        try:
            self.io.fsync_dir(os.path.join(self.dir, app))
            self._sync_ancestors(app)
        except OSError as e:
            msg = (
                f"commit decision {app}/{version} exists but could not be made durable "
                f"({e.strerror or e}); it is reported only once a retry syncs it"
            )
            raise (OSError(e.errno, msg, e.filename) if e.errno else OSError(msg)) from e
        log.debug("quiver.txn.commit_durable app=%s version=%d", app, version)

    def _sync_ancestors(self, app: str) -> None:
        """Fsync ``commits/`` and the store root once per app and instance (their entries
        for ``<app>/`` and ``commits/`` never change once made durable)."""
        if app in self._durable_dirs:
            return
        self.io.fsync_dir(self.dir)
        self.io.fsync_dir(os.path.dirname(self.dir))
        self._durable_dirs.add(app)

    def latest_version(self, app: str) -> int | None:
        """Highest committed version of ``app`` (for sinks that resume), or None."""
        versions = [
            fmt.parse_seq(n, ".commit") for n in self.io.listdir(os.path.join(self.dir, app))
        ]
        found = [v for v in versions if v is not None]
        return max(found) if found else None
