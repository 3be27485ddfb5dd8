"""The errors of a store's object root: an object request that did not do what it
asked (a condition that did not hold, an object not there or taken, a request failed,
refused or retried out, an outcome unknown; ARCHITECTURE.md §2), and a root configured
wrong (:class:`StorageConfigError` and its subclasses). Import them from
:mod:`quiver_spark.errors`, which shows them as its own."""

from __future__ import annotations

from .base import QuiverError

# -- object storage (ARCHITECTURE.md §2, quiver_spark.objects) ------------------------


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
    budget runs out (:mod:`quiver_spark.objects.retry`, ARCHITECTURE.md §2.2).

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
