"""The whole exception hierarchy of quiver_spark.

Every error derives from :class:`QuiverError`. Where a builtin fits, the error
inherits it too, so ``except ValueError`` keeps working for configuration mistakes
and ``except OSError`` for I/O trouble.
"""

from __future__ import annotations

import enum
import re


class QuiverError(Exception):
    """Raised for any failure inside quiver_spark (the root of the hierarchy)."""

    retryable: bool = False


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
    store's segments without reading them (ARCHITECTURE.md §9a).

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
    """Raised when another holder has a lease (ARCHITECTURE.md §12.3) that was not
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
    §12.3). Retryable in the sense that a new claim (a new lease, a higher epoch) may
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
    (ARCHITECTURE.md §12.4).

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
    disk into a new WAL file by itself (ARCHITECTURE.md §7.4), no reopen needed.
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
    seq (ARCHITECTURE.md §12.4). ``path`` names the object found.
    """

    def __init__(self, path: str, partition: str, seq: int) -> None:
        super().__init__(path)
        self.partition = partition
        self.seq = seq


class MissingKind(enum.StrEnum):
    """Why a published segment has no readable ``.meta`` (ARCHITECTURE.md §9a).

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


# -- object storage (ARCHITECTURE.md §12, quiver_spark.objects) ------------------------


class PreconditionFailed(QuiverError):
    """Raised when a conditional write's condition did not hold, so nothing was written.

    ``key`` names the object (as shown to a user), ``what`` says what was found.
    """

    def __init__(self, key: str, what: str) -> None:
        self.key = key
        self.what = what
        super().__init__(f"{key}: {what}")


class ObjectExists(PreconditionFailed):
    """Raised when ``create`` found the key already present."""


class VersionMismatch(PreconditionFailed):
    """Raised when ``replace`` found another version (or no object) under the key."""


class ObjectNotFound(QuiverError, FileNotFoundError):
    """Raised when object ``key`` (as shown to a user) that a read or a move needs is
    not there."""

    def __init__(self, key: str, message: str | None = None) -> None:
        self.key = key
        super().__init__(message or key)


class ObjectTaken(QuiverError, FileExistsError):
    """Raised when object ``key`` (as shown to a user), written once and never
    replaced, already holds other bytes than a write meant to put there (``what``
    says whose)."""

    def __init__(self, key: str, what: str) -> None:
        self.key = key
        self.what = what
        super().__init__(f"{key}: {what}")


class RequestFailed(QuiverError, OSError):
    """Raised when a request ``op`` (``get``, ``put``...) on object ``key`` (as shown)
    failed for a reason not told apart further (a 5xx, a connection dropped): it may
    succeed when sent again."""

    def __init__(self, op: str, key: str, message: str) -> None:
        self.op = op
        self.key = key
        super().__init__(message)


class RequestForbidden(RequestFailed, PermissionError):
    """Raised when the storage refused request ``op`` on object ``key`` as not allowed
    (401/403) where the root's credentials work otherwise: never retried."""


class ObjectConflict(QuiverError, OSError):
    """Raised when the storage refused a conditional write because another one on the
    same key was in progress (S3 409 ConditionalRequestConflict): nothing was written;
    retry. ``key`` names the object."""

    retryable = True

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class RequestRejected(QuiverError, OSError):
    """Raised when the storage, or the client before sending, refused the request for a
    reason sending it again cannot change (an HTTP 4xx other than 408, 409 and 429, a
    501, a client setting such as an ``http://`` endpoint without ``allow_http``): this
    request was not carried out. Never retried, unless ``retryable``
    (:class:`EndpointUnreachableError`). ``key`` names the object."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class RetriesExhausted(QuiverError, OSError):
    """Raised when a conditional write still fails with transient errors as its retry
    budget runs out (:mod:`quiver_spark.objects.retry`, ARCHITECTURE.md §12.1).

    ``key`` names the object and ``attempts`` counts the tries. Its outcome is unknown
    (an attempt may have landed) unless ``written_nothing``: every attempt was refused
    with a 409. The message is written for the user (the key, the attempts, the time
    spent and ``storage.retry_timeout``).
    """

    def __init__(
        self, key: str, message: str, *, attempts: int, written_nothing: bool = False
    ) -> None:
        self.key = key
        self.attempts = attempts
        self.written_nothing = written_nothing
        super().__init__(message)


class StorageClockUnknown(QuiverError, OSError):
    """Raised when the storage did not report when the clock probe ``key`` was written
    (a store that keeps no modification times): nothing can be decided on the
    storage's clock (:mod:`quiver_spark.objects.clock`)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class OutcomeUnknownError(QuiverError, OSError):
    """Raised when an ack-log append on an object root may or may not have committed
    and reading back cannot tell, or when a transaction's commit record was found
    taken and then gone (removed by hand) so its decision cannot be read. ``key``
    names the delta object or the commit record; retry the call."""

    retryable = True

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


# -- an object root configured wrong (quiver_spark.objects.cloud.classify) -------------


class StorageConfigError(RequestRejected):
    """Raised when an object root cannot be used as it is configured (no credentials,
    access denied, no such bucket, a malformed or plain-http endpoint, another region,
    an endpoint nothing answers at): one line saying what is wrong and what to set.

    ``url`` is the root as shown (never a credential); ``setting`` names what to set:
    a storage option as Spark spells it (``storage.aws_endpoint``; the engine's
    ``storage_options`` and the CLI's ``-S`` take it with or without ``storage.``), an
    environment variable, or ``path``. A :class:`RequestRejected`: sending the request
    again cannot help, so nothing retries it, but :class:`EndpointUnreachableError`
    (``retryable``: a storage that did not answer may answer later). Raised from
    :func:`quiver_spark.objects.cloud.classify`, and for a malformed endpoint before
    any request by :func:`quiver_spark.objects.options.check_endpoints`.
    """

    def __init__(self, url: str, setting: str, message: str, *, key: str | None = None) -> None:
        self.url = url
        self.setting = setting
        super().__init__(key or url, message)


class NoCredentialsError(StorageConfigError):
    """Raised when an S3 root has no credentials: none in its storage options, none in
    the environment, and the instance metadata service ``metadata`` gave none
    (``answer`` says what it did); or, with ``given`` and ``missing``, one half of a key
    pair was set without the other."""

    def __init__(
        self,
        url: str,
        *,
        metadata: str = "",
        answer: str = "",
        given: str | None = None,
        missing: str | None = None,
    ) -> None:
        self.metadata = metadata
        self.answer = answer
        if given and missing:
            super().__init__(
                url,
                missing,
                f"incomplete credentials for {url}: {given} is set but {missing} is not; "
                f"set {missing} as well",
            )
            return
        super().__init__(
            url,
            "storage.aws_access_key_id",
            f"no credentials for {url}: none in storage.aws_access_key_id/"
            "storage.aws_secret_access_key, none in the environment (AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE, "
            f"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI), and the instance metadata service at "
            f"{metadata} {answer}; set storage.aws_access_key_id and "
            "storage.aws_secret_access_key (or export AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), or storage.aws_skip_signature=true for a public bucket",
        )


class AccessDeniedError(StorageConfigError, PermissionError):
    """Raised when the storage answered 401/403 to a request of the root's: ``code`` is
    the storage's error code (S3 ``AccessDenied``, ``InvalidAccessKeyId``,
    ``SignatureDoesNotMatch``, ``ExpiredToken``...; empty when the answer had no body),
    ``request`` the request (``get STORE``), ``key_id`` the access key id used as it may
    be shown (``AKIA...MPLE``), None when none was set."""

    def __init__(
        self, url: str, *, request: str, status: int, code: str, key_id: str | None
    ) -> None:
        self.request = request
        self.status = status
        self.code = code
        self.key_id = key_id
        answered = f"{request} answered {status}{f' {code}' if code else ''}"
        key = f"access key id {key_id}" if key_id else "the access key id used"
        if code == "InvalidAccessKeyId":
            setting = "storage.aws_access_key_id"
            text = (
                f"the storage knows no {key} ({answered}); set storage.aws_access_key_id and "
                "storage.aws_secret_access_key to a key of the bucket's account"
            )
        elif code == "SignatureDoesNotMatch":
            setting = "storage.aws_secret_access_key"
            text = (
                f"storage.aws_secret_access_key is not the secret of {key} ({answered}); "
                "set the key's own secret"
            )
        elif code in ("ExpiredToken", "InvalidToken", "TokenRefreshRequired"):
            setting = "storage.aws_session_token"
            text = (
                f"the session token of {key} is expired or invalid ({answered}); set a fresh "
                "storage.aws_session_token with its key id and secret"
            )
        else:
            setting = "storage.aws_access_key_id"
            who = key if key_id else "the credentials found (environment or instance role)"
            text = (
                f"{answered}, not allowed for {who}; grant s3:GetObject, s3:PutObject, "
                "s3:DeleteObject and s3:ListBucket on the bucket and prefix (IAM or bucket "
                "policy), or set storage.aws_access_key_id and storage.aws_secret_access_key "
                "to a key that has them"
            )
        super().__init__(url, setting, f"access denied to {url}: {text}")


class NoSuchBucketError(StorageConfigError):
    """Raised when the bucket ``bucket`` of a root (or of a ``segment.path``: ``option``)
    does not exist at ``endpoint``."""

    def __init__(
        self, url: str, *, bucket: str, endpoint: str, endpoint_setting: str, option: str = "path"
    ) -> None:
        self.bucket = bucket
        self.endpoint = endpoint
        where = "the path" if option == "path" else option
        super().__init__(
            url,
            option,
            f"bucket {bucket!r} does not exist at {endpoint} ({url}): create it, or correct "
            f"the bucket in {where} (or {endpoint_setting} if the bucket is on another "
            "endpoint)",
        )


class EndpointUnreachableError(StorageConfigError):
    """Raised when nothing answered at ``endpoint`` while the root's retry budget
    (``storage.retry_timeout``, ``budget_s``) lasted: ``reason`` says what the last
    attempt met (connection refused, host not found, connect timed out). Retryable:
    a storage that is down may answer later."""

    retryable = True

    def __init__(
        self,
        url: str,
        *,
        endpoint: str,
        setting: str,
        request: str,
        reason: str,
        attempts: int,
        seconds: float,
        budget_s: float,
    ) -> None:
        self.endpoint = endpoint
        self.reason = reason
        self.attempts = attempts
        self.seconds = seconds
        what = "got no answer" if reason.startswith("connected") else "could not connect"
        super().__init__(
            url,
            setting,
            f"nothing answered at {endpoint} ({url}): {request} {what} "
            f"({reason}) in {attempts} attempts over {seconds:.1f}s, storage.retry_timeout "
            f"being {budget_s:g}s; check {setting} (scheme, host and port) and that the "
            "storage is running",
        )


class HttpNotAllowedError(StorageConfigError):
    """Raised when the root's endpoint is plain ``http://`` and the client does not
    allow it: ``setting`` (``storage.aws_allow_http``) is not true; ``note`` says where
    a false value came from."""

    def __init__(self, url: str, *, endpoint: str, setting: str, note: str = "") -> None:
        self.endpoint = endpoint
        super().__init__(
            url,
            setting,
            f"the endpoint {endpoint} is plain http, which the client refuses unless "
            f"{setting}=true{note} ({url}): set {setting}=true, or use an https:// endpoint",
        )


class InvalidEndpointError(StorageConfigError, ValueError):
    """Raised, before anything is contacted, when an endpoint setting (``setting``:
    ``storage.aws_endpoint``, or the environment variable that set it) is not a URL the
    client can use; ``value`` is what was given, ``reason`` what is wrong with it."""

    def __init__(self, url: str, *, setting: str, value: str, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(
            url,
            setting,
            f"{setting} {value!r} is not an endpoint URL: {reason}; allowed: http:// or "
            "https://, a host and an optional port (e.g. http://127.0.0.1:9000 or "
            "https://s3.eu-west-1.amazonaws.com)",
        )


class WrongRegionError(StorageConfigError):
    """Raised when the bucket is not in ``region``, the region the client signs
    requests for; ``expected`` is the bucket's region when the storage said it."""

    def __init__(
        self, url: str, *, bucket: str, region: str, region_from: str, expected: str | None
    ) -> None:
        self.bucket = bucket
        self.region = region
        self.expected = expected
        bucket_region = f" ({expected})" if expected else ""
        super().__init__(
            url,
            "storage.aws_region",
            f"bucket {bucket!r} is not in region {region!r} ({region_from}; {url}): set "
            f"storage.aws_region to the bucket's region{bucket_region}",
        )


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
