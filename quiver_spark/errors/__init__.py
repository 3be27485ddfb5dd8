"""The whole exception hierarchy of quiver_spark.

Every error derives from :class:`QuiverError`. Where a builtin fits, the error
inherits it too, so ``except ValueError`` keeps working for configuration mistakes
and ``except OSError`` for I/O trouble.

Import every error from here. The root and the errors of an object root live in
:mod:`.base` and :mod:`.storage`; this module re-exports them and names them its own
(``__module__``), so each error shows and pickles as ``quiver_spark.errors.<Kind>``
wherever it is defined: the name README promises on the first line Spark prints.
"""

from __future__ import annotations

import enum
import re

from . import base, storage
from .base import QuiverError
from .storage import AccessDeniedError as AccessDeniedError
from .storage import EndpointUnreachableError as EndpointUnreachableError
from .storage import HttpNotAllowedError as HttpNotAllowedError
from .storage import InvalidEndpointError as InvalidEndpointError
from .storage import NoCredentialsError as NoCredentialsError
from .storage import NoSuchBucketError as NoSuchBucketError
from .storage import ObjectConflict as ObjectConflict
from .storage import ObjectExists as ObjectExists
from .storage import ObjectNotFound as ObjectNotFound
from .storage import ObjectTaken as ObjectTaken
from .storage import OutcomeUnknownError as OutcomeUnknownError
from .storage import PreconditionFailed as PreconditionFailed
from .storage import RequestFailed as RequestFailed
from .storage import RequestForbidden as RequestForbidden
from .storage import RequestRejected as RequestRejected
from .storage import RetriesExhausted as RetriesExhausted
from .storage import StorageClockUnknown as StorageClockUnknown
from .storage import StorageConfigError as StorageConfigError
from .storage import VersionMismatch as VersionMismatch
from .storage import WrongRegionError as WrongRegionError

for _module in (base, storage):
    for _kind in vars(_module).values():
        if isinstance(_kind, type) and _kind.__module__ == _module.__name__:
            _kind.__module__ = __name__
del _module, _kind


class ConfigError(QuiverError, ValueError):
    """Raised when an option or configuration value is invalid.

    The message names the option, the value given and what is allowed.
    """

    def __init__(self, option: str, value: object, allowed: str) -> None:
        self.option = option
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid value for option {option!r}: {value!r}; allowed: {allowed}")


class InvalidNameError(ConfigError):
    """Raised when a name that reaches a path (subscriber, partition) is malformed."""

    def __init__(self, kind: str, value: object) -> None:
        super().__init__(kind, value, "1 to 64 characters from [A-Za-z0-9_.-], not '.' or '..'")


class StoreNotFoundError(QuiverError, FileNotFoundError):
    """Raised when a path that should hold a Quiver store does not."""


MAKING_A_STORE = (
    "a store is made by a sink's first write, or by quiver subscribers PATH add NAME --create"
)
"""How a store comes to be, as every "not a Quiver store" message says it."""


class PolicyConflictError(ConfigError):
    """Raised when an explicit option contradicts the store's recorded policy, or a
    policy change lost the race with another one."""

    def __init__(self, option: str, value: object, allowed: str) -> None:
        super().__init__(option, value, allowed)
        self.args = (f"option {option}={value} contradicts {allowed}",)


class StoreProfileError(ConfigError):
    """Raised when a store profile (the YAML file named by option ``config``,
    ``--config`` or the environment variable ``QUIVER_CONFIG``) cannot be used: one line
    naming the file and what named it, never a value the file holds."""

    def __init__(self, option: str, value: object, allowed: str, message: str) -> None:
        super().__init__(option, value, allowed)
        self.args = (message,)


class SchemaUnavailableError(QuiverError, ValueError):
    """Raised when a store has no schema yet and the query gave none."""


class ReadSchemaError(QuiverError, ValueError):
    """Raised at query start when a read schema names a column the store lacks."""


class OffsetFormatError(QuiverError, ValueError):
    """Raised when a checkpointed offset is not a valid Quiver source offset."""


class ForeignCheckpointError(QuiverError, ValueError):
    """Raised when a streaming query resumes from a checkpoint whose offsets name
    another store than the one it reads: its offsets would make it acknowledge this
    store's segments without reading them (ARCHITECTURE.md §17).

    ``checkpoint_store`` is the id the offsets name, ``store`` the id of the store read.
    """

    def __init__(self, message: str, *, checkpoint_store: str, store: str) -> None:
        super().__init__(message)
        self.checkpoint_store = checkpoint_store
        self.store = store


class StoreClosedError(QuiverError):
    """Raised when a closed store or writer is used."""


class SegmentReaderClosedError(StoreClosedError, ValueError):
    """Raised when a closed segment reader (``path``) is read: a ValueError too, as
    reading a closed file is."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"segment reader for {path} is closed")


class LockedError(QuiverError):
    """Raised when another writer holds a partition's lock.

    ``holder`` describes the holder (pid, host, since) as recorded in the LOCK file.
    """

    retryable = True

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"partition {path} is locked by {holder}; one writer per partition")


class LeaseHeldError(LockedError):
    """Raised when another holder has a lease (ARCHITECTURE.md §8.2) that was not
    released, has not expired by this process's observation, and whose holder is not
    known dead: one holder at a time.

    A :class:`LockedError`, so every handler of a held partition lock handles it too;
    ``holder`` names the holder (pid, host, role, since) and when its lease expires.
    """

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(path, holder)
        self.args = (f"lease {path} is held by {holder}; one holder at a time",)


class LeaseLostError(QuiverError):
    """Raised when a holder's lease was taken over (a higher epoch or another holder's
    token is in the lease object), deleted, or can no longer be read.

    Work under the lost epoch must stop: its successor fences it (ARCHITECTURE.md
    §8.2). Retryable in the sense that a new claim (a new lease, a higher epoch) may
    succeed once the successor lets go.
    """

    retryable = True

    def __init__(self, path: str, epoch: int, new_epoch: int | None, now: str) -> None:
        self.path = path
        self.epoch = epoch
        self.new_epoch = new_epoch
        super().__init__(
            f"lease {path} was lost: this holder had epoch {epoch}, {now}; "
            f"work under epoch {epoch} must stop (its successor fences it)"
        )


class FencedError(LeaseLostError):
    """Raised when a writer finds its partition's MANIFEST written under a higher epoch:
    another writer took the partition over, and this one must stop writing it
    (ARCHITECTURE.md §11.3).

    ``path`` names the partition, ``epoch`` this writer's epoch and ``new_epoch`` the
    one the MANIFEST was written at.
    """

    def __init__(self, path: str, epoch: int, new_epoch: int) -> None:
        super().__init__(
            path, epoch, new_epoch, f"the manifest was written at epoch {new_epoch} since"
        )


class CorruptionError(QuiverError):
    """Raised when a persisted unit fails verification.

    ``path`` and ``offset`` locate the damage; ``reason`` says what was wrong.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{reason} at {path}:{offset}")


class ChecksumMismatchError(CorruptionError):
    """Raised when a stored checksum differs from the one computed over the bytes."""

    def __init__(self, path: str, offset: int, what: str, stored: int, computed: int) -> None:
        self.stored = stored
        self.computed = computed
        super().__init__(
            path, offset, f"{what} crc mismatch: stored 0x{stored:08x} computed 0x{computed:08x}"
        )


class VersionError(CorruptionError):
    """Raised when a file has an unknown magic or a format version this build cannot read."""


class SchemaMismatchError(QuiverError, ValueError):
    """Raised when appended data has a schema incompatible with the store's schema."""

    def __init__(self, expected: object, actual: object, detail: str = "") -> None:
        self.expected = expected
        self.actual = actual
        more = f" ({detail})" if detail else ""
        super().__init__(
            f"incompatible schema{more}:\n  store schema: {expected}\n  given schema: {actual}"
        )


class TransactionSchemaError(SchemaMismatchError):
    """Raised when the batches of one transaction do not share column names and types
    (nullability and metadata aside): ``partition`` and ``txn_id`` name the
    transaction, ``batch`` the first batch that differs from batch 0; ``expected`` and
    ``actual`` are the two batches' column names (or, when only types differ, types)."""

    def __init__(
        self,
        message: str,
        *,
        partition: str,
        txn_id: int,
        batch: int,
        expected: object,
        actual: object,
    ) -> None:
        super().__init__(expected, actual)
        self.partition = partition
        self.txn_id = txn_id
        self.batch = batch
        self.args = (message,)


class StoreAtCapacityError(QuiverError):
    """Raised when an append waited for space under ``backpressure`` and none came.

    Retryable: nothing was written; retry once subscribers have acknowledged data.
    """

    retryable = True


class BatchTooLargeError(QuiverError, ValueError):
    """Raised at once when one batch can never fit in ``wal.max_size``.

    Not retryable: nothing was written; split the batch or raise ``wal.max_size``.
    """

    retryable = False


class WalFailedError(QuiverError, OSError):
    """Raised once, to the next caller, after a WAL write or fsync failed.

    The failed WAL file is never written or synced again. The call that raised is not
    acknowledged and may be retried whole; the partition's next call recovers it from
    disk into a new WAL file by itself (ARCHITECTURE.md §9.4), no reopen needed.
    """


class WalNotRecoveredError(QuiverError):
    """Raised when a WAL writer would open a file at seq ``seq`` in ``wal_dir`` while
    the directory already holds a file at or after that seq: the WAL must be recovered
    (its next seq taken from what it holds) before anything is written to it."""

    def __init__(self, wal_dir: str, seq: int) -> None:
        self.wal_dir = wal_dir
        self.seq = seq
        super().__init__(
            f"wal directory {wal_dir} already holds a file at or after seq {seq}; "
            "recover the wal before writing"
        )


class WalTimeoutError(QuiverError, TimeoutError):
    """Raised when WAL record ``seq`` was not durable within ``timeout_s`` seconds of a
    wait for it. Retryable: the record is written, and may still become durable."""

    retryable = True

    def __init__(self, seq: int, timeout_s: float | None) -> None:
        self.seq = seq
        self.timeout_s = timeout_s
        super().__init__(f"wal seq {seq} not durable after {timeout_s}s")


class UnknownSegmentError(QuiverError, KeyError):
    """Raised when an acknowledgement names a segment that never existed."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message plain
        return str(self.args[0]) if self.args else ""


class SubscriberError(QuiverError, ValueError):
    """Raised for subscriber misuse: unknown id, duplicate registration, live duplicate."""


class InvalidArgumentError(QuiverError, ValueError):
    """Raised when a caller passes an engine call an argument it does not take (an
    empty list of batches, a seq out of order, a negative version): nothing was done.

    ``argument`` names the argument, ``value`` is what was given (a count or a seq when
    the value itself is large), ``allowed`` says what the call takes; ``message``, when
    given, is the one-line report (else it is made from the three).
    """

    def __init__(
        self, argument: str, value: object, allowed: str, message: str | None = None
    ) -> None:
        self.argument = argument
        self.value = value
        self.allowed = allowed
        super().__init__(message or f"invalid {argument} {value!r}; allowed: {allowed}")


class UnknownTransactionError(InvalidArgumentError):
    """Raised when a call names transaction ``txn_id`` of ``partition`` that the
    partition's writer does not hold pending: never begun, or already decided."""

    def __init__(self, partition: str, txn_id: int) -> None:
        self.partition = partition
        self.txn_id = txn_id
        super().__init__(
            "transaction",
            txn_id,
            "a transaction begun on this writer and not decided yet",
            f"unknown or already decided transaction {txn_id}",
        )


class BatchDiscardedError(QuiverError):
    """Raised when a sink's batch ``version`` of query ``app`` is written again after
    it was decided with no winners (discarded with ``quiver txns ... discard``): its
    rerun would store its rows twice or drop them silently, so it is refused."""

    def __init__(self, app: str, version: int) -> None:
        self.app = app
        self.version = version
        super().__init__(
            f"quiver sink: batch {version} of query {app} was discarded earlier "
            "(`quiver txns ... discard`): its rerun is refused so that its rows are "
            "neither stored twice nor dropped silently. This checkpoint cannot go past "
            "that batch: start the query on a new checkpoint, choosing its starting "
            "point so that batches already in the store are not written again."
        )


class ManifestUnreadableError(QuiverError):
    """Raised when work that must know what a partition's MANIFEST records (sealing the
    staged transactions a lost writer left) finds it unreadable: ``partition`` names
    the partition, ``path`` the MANIFEST and ``reason`` what is wrong with it. Nothing
    is guessed; the partition's next writer rewrites the MANIFEST."""

    def __init__(self, partition: str, path: str, reason: str, message: str) -> None:
        self.partition = partition
        self.path = path
        self.reason = reason
        super().__init__(message)


class LostRaceError(QuiverError, OSError):
    """Raised when a write lost to other writers every time it was tried (``attempts``
    times; None when it is not counted): conditional writes of one key, seqs of one
    partition taken by another holder of its lease, a file removed while it was made.
    ``where`` names the key or partition. Nothing of the lost attempts was written;
    retryable: the call may be made again."""

    retryable = True

    def __init__(self, where: str, message: str, *, attempts: int | None = None) -> None:
        self.where = where
        self.attempts = attempts
        super().__init__(message)


class RemovalHeldError(QuiverError, OSError):
    """Raised when a retention pass must keep segments ``seqs`` of ``partition``
    because what must go before them could not: the next pass deletes them."""

    retryable = True

    def __init__(self, partition: str, seqs: list[int]) -> None:
        self.partition = partition
        self.seqs = seqs
        super().__init__(
            f"partition {partition}: segments {seqs} kept: what must go before them "
            "could not (logged quiver.gc.held); the next pass deletes them"
        )


class PolicyRepairError(QuiverError):
    """Raised when ``quiver config PATH repair`` is asked for something it does not
    do: rewrite a POLICY that reads fine (``damaged`` false), or rewrite a damaged
    one without saying from what (``--from-last-good`` or ``KEY=VALUE``; ``damaged``
    true). ``path`` names the POLICY file."""

    def __init__(self, path: str, message: str, *, damaged: bool) -> None:
        self.path = path
        self.damaged = damaged
        super().__init__(message)


class MetricsFormatError(QuiverError, ValueError):
    """Raised when a metrics file is not UTF-8 text in the Prometheus exposition
    format; ``reason`` says what is wrong (with the byte ``offset`` when known)."""

    def __init__(self, reason: str, offset: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        super().__init__(reason)


class SinkContextError(QuiverError):
    """Raised when the quiver sink is run outside what it needs: its ``write`` outside
    a Spark task of a streaming query (``query_id`` or ``batch_id``, the task's local
    properties, missing), or its commit given messages of other transactions than
    batch ``batch_id``'s (``query_id`` then lists the ones named)."""

    def __init__(self, message: str, *, query_id: object = None, batch_id: object = None) -> None:
        self.query_id = query_id
        self.batch_id = batch_id
        super().__init__(message)


class MissingDependencyError(QuiverError, ImportError):
    """Raised at a query's start when quiver_spark was imported from ``archive`` (a
    ``--py-files`` zip, which carries no dependencies) and module ``module`` it needs
    is not installed: ship it with ``--archives`` or install the wheel on every node."""

    def __init__(self, archive: str, module: str) -> None:
        self.archive = archive
        self.module = module
        super().__init__(
            f"quiver_spark was imported from {archive} (spark-submit --py-files), which "
            f"carries none of its dependencies, and {module} is not installed: ship the "
            "package with its dependencies with --archives (docs/cluster.md, section 1), "
            "or pip install the wheel on every node",
            name=module,
        )


class SegmentExistsError(QuiverError, FileExistsError):
    """Raised when a write names a segment seq that is already published.

    Writing it again would be sequence reuse; a retry of the very same bytes is
    accepted instead (see :meth:`SegmentLocation.write`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"segment {path} is already published with different content")


class SeqTakenError(SegmentExistsError):
    """Raised on an object root when the objects of seq ``seq`` of ``partition`` hold
    bytes this writer did not write (another holder of the partition's lease made
    them). The writer records the seq void in the MANIFEST and publishes at the next
    seq (ARCHITECTURE.md §11.3). ``path`` names the object found.
    """

    def __init__(self, path: str, partition: str, seq: int) -> None:
        super().__init__(path)
        self.partition = partition
        self.seq = seq


class MissingKind(enum.StrEnum):
    """Why a published segment has no readable ``.meta`` (ARCHITECTURE.md §17).

    A :class:`str` enum: each member equals its on-disk and message spelling
    (``MissingKind.DELETED == "deleted"``), so it goes into JSON lines and metric labels
    as that string.
    """

    DELETED = "deleted"
    """Retention recorded its deletion: expected, never data loss."""
    QUARANTINED = "quarantined"
    """Moved to ``<pid>/quarantine/`` (``evidence`` names the reason file)."""
    MISSING = "missing"
    """Not there, nothing more known."""
    CORRUPT = "corrupt"
    """There, but it fails verification."""


class SegmentMissingError(QuiverError):
    """Raised when a segment a reader needs is not there (any more).

    ``kind`` (a :class:`MissingKind`; given as a member or its name) says why, for
    callers that must not parse the message; ``evidence`` names the quarantine reason
    file or the damaged file.
    See :mod:`quiver_spark.dataloss`.
    """

    def __init__(
        self,
        partition: str,
        seq: int,
        reason: str = "missing",
        *,
        kind: MissingKind | str = MissingKind.MISSING,
        evidence: str | None = None,
    ) -> None:
        self.partition = partition
        self.seq = seq
        self.kind = MissingKind(kind)
        self.evidence = evidence
        super().__init__(f"segment {seq} of partition {partition} is {reason}")


class DataLossError(SegmentMissingError):
    """Raised (``failOnDataLoss=true``) for a published segment that is lost:
    vanished, quarantined or corrupt (``kind``), never for one retention deleted."""


class UnknownOptionError(ConfigError):
    """Raised at query start for an option the source or sink does not know."""

    def __init__(self, option: str, value: object, allowed: str) -> None:
        super().__init__(option, value, allowed)
        shown = "" if _may_be_secret(option) else f" (value {value!r})"
        self.args = (f"unknown option {option!r}{shown}; allowed: {allowed}",)


class UnknownStorageOptionError(ConfigError):
    """Raised for a storage option no client of the root takes: one line naming the
    key as each door spells it and the near miss, never its value."""

    def __init__(self, key: str, allowed: str) -> None:
        super().__init__(f"storage.{key}", "***", allowed)
        self.key = key
        self.args = (
            f"unknown storage option {key!r} (option storage.{key} in Spark, -S {key}=... "
            f"on the command line, storage_options={{{key!r}: ...}} in the engine); "
            f"allowed: {allowed}",
        )


class UnknownProfileOptionError(UnknownOptionError):
    """Raised for a key in a store namespace of a store profile that is no store
    option: one line naming the file, what named it and the near miss, never the value
    the file holds."""

    def __init__(self, option: str, value: object, allowed: str, message: str) -> None:
        super().__init__(option, value, allowed)
        self.args = (message,)


_SECRET_WORDS = re.compile(
    r"secret|password|passwd|token|credential|key|sas|signature|auth|private|session",
    re.IGNORECASE,
)
"""Words in an unknown option's name that make its value a possible credential (a
misspelt ``storage.`` prefix: ``storge.aws_secret_access_key``), so it is not shown."""


def _may_be_secret(option: str) -> bool:
    return bool(_SECRET_WORDS.search(option))


# -- the command line -------------------------------------------------------------------


class CliError(QuiverError):
    """Raised by a ``quiver`` command for what it reports as one ``Error: <message>``
    line on stderr, exiting with ``exit_code`` (2, a usage mistake, unless given; see
    :mod:`quiver_spark.cli.common`). The command group turns it into click's report.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        self.message = message
        self.exit_code = exit_code
        super().__init__(message)
