"""Transaction commit records: the single, atomic commit decision of a transaction.

A transaction is identified by ``(app, version)`` (like Delta's txnAppId/txnVersion;
the Spark sink uses the streaming query id and the batch id). Writers append data
records tagged with a per-partition transaction id; the committer writes one commit
record naming the winning ``(partition, txn_id)`` pairs. A partition's finalizer
makes only winners' records visible and discards every other transaction of the
same ``(app, version)``. Writing the commit record (created if absent, on any root:
ARCHITECTURE.md §10.1, §2.3) is the only commit step, so a crash leaves either no
decision (the batch is retried) or the whole decision. See ARCHITECTURE.md §10.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from . import format as fmt
from . import layout
from .config import validate_name
from .errors import CorruptionError, InvalidArgumentError, ObjectExists, OutcomeUnknownError
from .fs import DEFAULT_IO, FileIO
from .objects import ObjectStore
from .objects.writes import retry_conflicts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitRecord:
    """A durable commit decision."""

    app: str
    version: int
    winners: frozenset[tuple[str, int]]
    committed_ns: int
    rows: int
    store: str | None = None
    """The id of the store whose committer wrote it (ARCHITECTURE.md §7.1); None in
    records written before records named their store."""


class Durability(Protocol):
    """How a root's commit records become durable, which its kind hands the log
    (:mod:`~quiver_spark.root_kind`): :class:`SyncedNames` on a POSIX root,
    :data:`STORED` on an object root."""

    reads_first: bool
    """Whether :meth:`CommitLog.commit` reads before it creates: on POSIX a name left
    by a failed call is made durable (or the failure named) before any create; on an
    object root the create's answer says whether it was decided (one request fewer)."""

    lookups_back_off: bool
    """Whether a writer looks for an undecided transaction's record ever more rarely
    once its grace is over: the records are objects in a bucket, each look a request
    (§10); a POSIX root's look is a file read."""

    def sync_record(self, key: str) -> None:
        """Make the name of the existing record ``key`` durable."""

    def sync_commits(self) -> None:
        """Make the entries of ``commits/`` and of the root itself durable."""


class SyncedNames:
    """A POSIX root's records: a name may exist only in the page cache until its
    directory is fsynced (§10.1), so every name found or made is synced before any
    answer."""

    reads_first = True
    lookups_back_off = False

    def __init__(self, root: str, io: FileIO = DEFAULT_IO) -> None:
        self.root = os.path.abspath(root)
        self.io = io

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def sync_record(self, key: str) -> None:
        self.io.fsync_dir(os.path.dirname(self._path(key)))

    def sync_commits(self) -> None:
        commits_dir = self._path(layout.commits_dir())
        self.io.fsync_dir(commits_dir)
        self.io.fsync_dir(os.path.dirname(commits_dir))


class StoredObjects:
    """An object root's records: an object is durable once it can be read."""

    reads_first = False
    lookups_back_off = True

    def sync_record(self, key: str) -> None:
        return None

    def sync_commits(self) -> None:
        return None


STORED = StoredObjects()
"""The durability of an object root's commit records."""


class CommitLog:
    """The ``commits/`` objects of a store root; ``store``: that store's id, which the
    records this log writes name; ``durability``: how the root makes a record durable,
    as its kind hands it."""

    def __init__(
        self, objects: ObjectStore, store: str | None = None, *, durability: Durability
    ) -> None:
        self.objects = objects
        self.store = store
        self.durability = durability
        self.lookups_back_off = durability.lookups_back_off
        """Whether a writer looks for an undecided transaction's record ever more rarely
        once its grace is over (:attr:`Durability.lookups_back_off`)."""
        # decisions this instance has made durable (on POSIX: their names fsynced):
        # only these are ever returned without reading (and syncing) them again
        self._cache: dict[tuple[str, int], CommitRecord] = {}
        # apps whose directory's own entry (and ``commits/``'s) this instance has synced
        self._durable_dirs: set[str] = set()
        # decisions this instance wrote, or tried to (a create that raised: outcome
        # unknown), with their exact bytes: a retry of the same decision writes the
        # same bytes and recognises them as its own
        self._own: dict[tuple[str, int], tuple[CommitRecord, bytes]] = {}

    def _app_prefix(self, app: str) -> str:
        validate_name("transaction app id", app)
        return layout.commit_app_prefix(app)

    def key(self, app: str, version: int) -> str:
        validate_name("transaction app id", app)
        if not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(
                "version",
                version,
                "a non-negative integer",
                f"transaction version must be a non-negative integer, got {version!r}",
            )
        return layout.commit_record(app, version)

    def path(self, app: str, version: int) -> str:
        """Where the record of ``(app, version)`` is, as messages show it."""
        return self.objects.display(self.key(app, version))

    def commit(
        self, app: str, version: int, winners: Iterable[tuple[str, int]], rows: int = 0
    ) -> bool:
        """Record the decision; True when the recorded decision is this one (written
        by this call, or by an earlier call of this instance with the same winners and
        rows, whose outcome may have been unknown), False when ``(app, version)`` was
        already decided otherwise.

        Idempotent: a second call for the same transaction changes nothing (the first
        decision stands, as a rerun batch must not publish a second copy). The record
        is created if absent, so of two committers racing on one ``(app, version)``
        exactly one writes its decision and gets True; the other gets False and
        :meth:`get` returns the winner's decision.

        Either answer is given only once the decision is durable (ARCHITECTURE.md §10.1):
        a call that raised left the decision unknown, and its retry that finds the
        record (on POSIX: a name left by the failed call in the page cache) makes it
        durable before answering.
        """
        key = self.key(app, version)
        pairs = tuple(sorted((str(p), int(t)) for p, t in winners))
        earlier = self._own.get((app, version))
        if earlier is not None and (earlier[0].winners, earlier[0].rows) == (
            frozenset(pairs),
            int(rows),
        ):
            data = earlier[1]  # the same decision again: the same bytes
        else:
            body = {
                "app": app,
                "version": version,
                "winners": [[p, t] for p, t in pairs],
                "committed_ns": time.time_ns(),
                "rows": int(rows),
            }
            if self.store is not None:
                body["store"] = self.store
            data = fmt.encode_frame(fmt.MAGIC_COMMIT, body)
        mine = self._parse(app, version, data)
        # On an object root the create's answer says whether it was already decided:
        # no read first (one request fewer). On POSIX the read comes first: a name left
        # by a failed call is made durable (or the failure named) before any create.
        known = (
            self.get(app, version)
            if self.durability.reads_first
            else self._cache.get((app, version))
        )
        if known is not None:
            return self._decided(known, mine)
        try:
            retry_conflicts(lambda: self.objects.create(key, data))
        except ObjectExists:
            decided = self.get(app, version)  # and on POSIX made durable before any answer
            if decided is None:  # removed meanwhile: only by hand; nothing is reported
                shown = self.path(app, version)
                raise OutcomeUnknownError(shown, f"{shown} appeared and vanished; retry") from None
            return self._decided(decided, mine)
        except OSError:  # outcome unknown: the retry of this decision recognises its bytes
            self._own[(app, version)] = (mine, data)
            raise
        # the create synced the record's directory (POSIX); its ancestors' entries (made
        # by a mkdir whose parent fsync may have failed earlier) too before reporting
        self._own[(app, version)] = (mine, data)
        self._sync_ancestors(app)
        self._cache[(app, version)] = mine
        log.info("quiver.txn.commit app=%s version=%d winners=%d", app, version, len(pairs))
        return True

    def _decided(self, decided: CommitRecord, mine: CommitRecord) -> bool:
        """The answer to a committer that found ``decided`` recorded: True when it is
        this instance's own earlier attempt of the same decision (the same bytes)."""
        app, version = decided.app, decided.version
        own = self._own.get((app, version))
        if own is not None and own[0] == decided == mine:
            log.info("quiver.txn.commit_recognised app=%s version=%d", app, version)
            return True
        log.info(
            "quiver.txn.commit_already_decided app=%s version=%d winners=%d "
            "(a replay, or another committer won)",
            app,
            version,
            len(decided.winners),
        )
        return False

    def get(self, app: str, version: int) -> CommitRecord | None:
        """The durable decision for ``(app, version)``, or None while undecided.

        On POSIX a name found may exist only in the page cache (its creator failed
        before or in the directory fsync, in this process or in one that is gone): it
        is made durable (directory fsyncs) before it is returned, so nobody acts on a
        decision that a power loss could take back. A failure to do so raises
        ``OSError``; the next call tries again. (An object store's objects are durable
        once they can be read.)
        """
        hit = self._cache.get((app, version))
        if hit is not None:
            return hit
        got = self.objects.get(self.key(app, version))
        if got is None:
            return None
        rec = self._parse(app, version, got.data)
        self._make_durable(app, version)
        self._cache[(app, version)] = rec
        return rec

    def _parse(self, app: str, version: int, raw: bytes) -> CommitRecord:
        path = self.path(app, version)
        body = fmt.decode_frame(path, fmt.MAGIC_COMMIT, raw)
        try:
            return CommitRecord(
                app=str(body["app"]),
                version=int(body["version"]),
                winners=frozenset((str(p), int(t)) for p, t in body["winners"]),
                committed_ns=int(body["committed_ns"]),
                rows=int(body.get("rows", 0)),
                store=None if body.get("store") is None else str(body["store"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"bad commit record: {e}") from e

    def _make_durable(self, app: str, version: int) -> None:
        """On POSIX, make the name of an existing record durable: fsync its directory
        (a new fd). The record's content needs nothing: a name is only ever linked to
        a temporary file whose fsync succeeded (§10.1), so its bytes are durable
        whenever its name is; only the directory entries may still be volatile.
        """
        try:
            self.durability.sync_record(self.key(app, version))
            self._sync_ancestors(app)
        except OSError as e:
            msg = (
                f"commit decision {app}/{version} exists but could not be made durable "
                f"({e.strerror or e}); it is reported only once a retry syncs it"
            )
            raise (OSError(e.errno, msg, e.filename) if e.errno else OSError(msg)) from e
        log.debug("quiver.txn.commit_durable app=%s version=%d", app, version)

    def _sync_ancestors(self, app: str) -> None:
        """On POSIX, fsync ``commits/`` and the store root once per app and instance
        (their entries for ``<app>/`` and ``commits/`` never change once durable)."""
        if app in self._durable_dirs:
            return
        self.durability.sync_commits()
        self._durable_dirs.add(app)

    def has_earlier(self, app: str, version: int) -> bool:
        """Whether ``app`` has a record of a version below ``version``: one HEAD of
        ``version - 1`` (a running query's last batch), else one listing of the app's
        records. Only informs (a query that meets none of its earlier batches here)."""
        if version <= 0:
            return False
        if self.objects.head(self.key(app, version - 1)) is not None:
            return True
        prefix = self._app_prefix(app)
        return any(
            (v := layout.parse_commit_version(i.key[len(prefix) :])) is not None and v < version
            for i in self.objects.list(prefix)
        )

    def latest_version(self, app: str) -> int | None:
        """Highest committed version of ``app`` (for sinks that resume), or None."""
        prefix = self._app_prefix(app)
        versions = [
            layout.parse_commit_version(i.key[len(prefix) :]) for i in self.objects.list(prefix)
        ]
        found = [v for v in versions if v is not None]
        return max(found) if found else None
