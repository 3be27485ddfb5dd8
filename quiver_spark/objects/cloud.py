"""Objects in S3, GCS or Azure Blob through obstore (ARCHITECTURE.md §2.2).

``s3://bucket/prefix`` (also ``s3a://``), ``gs://bucket/prefix`` (``gcs://``),
``az://account/container/prefix`` (``abfs://``, ``abfss://``), opened by obstore's
``from_url`` with the storage options (:mod:`.options` splits them into store config and
HTTP client options).

- ``create``: ``PUT`` with ``If-None-Match: *``; ``replace``: ``PUT`` with ``If-Match``
  (GCS: the generation). Both go through a client with obstore's retries turned off
  (obstore retries a conditional ``PUT`` after a 5xx or a dropped connection, and a
  retry whose first attempt had landed answers 412, which would report a write that
  happened as a precondition failure) and are retried instead by
  :func:`~.retry.write_conditionally`, which reads an unknown outcome back, within the
  budget of storage option ``retry_timeout`` (60 s).
- Every other request uses obstore's retries (at most 5, within the same budget: 5xx,
  connection errors, timeouts).
- A mistake of configuration (no credentials, access denied, no such bucket, plain
  http without ``allow_http``, another region, an endpoint nothing answers at within
  the budget) is one :class:`~quiver_spark.errors.StorageConfigError` naming what to
  set, from :func:`classify`; a malformed endpoint is refused before obstore sees it
  (:meth:`~.options.StorageOptions.check_endpoints`). A request fails within
  ``retry_timeout``: obstore starts no retry after its own ``retry_timeout``, which is
  the budget less the longest pause and connect timeout an attempt started just before
  may take (:func:`read_retry`); the connect timeout is at most a quarter of the budget
  (5 s at the default) unless ``connect_timeout`` sets it.
- Errors: ``AlreadyExistsError`` -> :class:`ObjectExists`; ``PreconditionError``
  (412, or 404 for ``If-Match`` on a missing key) -> :class:`VersionMismatch`; a 409
  (S3 ``ConditionalRequestConflict``, which obstore reports as ``AlreadyExistsError``)
  -> :class:`ObjectConflict`; not found -> None / ignored (a ``create`` ->
  ``FileNotFoundError``: no bucket); a 4xx other than 408/409/429, a 501 or a client
  setting obstore cannot build a request with -> :class:`RequestRejected`; anything
  else -> ``OSError`` (``PermissionError`` for 401/403) with obstore's first line,
  every storage-option secret and URL credential removed.
- version: the ETag (S3, Azure), ``<etag>#<generation>`` on GCS. An S3 ETag is the MD5
  of the bytes: a write of identical bytes keeps the version.
- modified time: the storage's ``last_modified`` (S3's Last-Modified, whole seconds),
  by the storage's clock, as ``modified_ns``.
- ``list``: obstore lists by path segment (``a/b`` is not a prefix of ``a/bc``), so the
  listing asks for the prefix's directory and keeps the keys that start with the
  prefix; ``after`` is obstore's ``offset`` (S3 ``start-after``).
- ``list_dirs``: obstore's ``list_with_delimiter`` (S3 ``delimiter=/``): the common
  prefixes, one request a page of them, whatever the objects inside.
"""

from __future__ import annotations

import builtins
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from ..errors import (
    AccessDeniedError,
    ConfigError,
    EndpointUnreachableError,
    HttpNotAllowedError,
    NoCredentialsError,
    NoSuchBucketError,
    ObjectConflict,
    ObjectExists,
    ObjectNotFound,
    RequestFailed,
    RequestForbidden,
    RequestRejected,
    StorageConfigError,
    VersionMismatch,
    WrongRegionError,
)
from ..urls import object_family
from ..values import parse_duration
from .base import Level, ObjectInfo, ObjectStore, Stored, check_directory
from .options import ENDPOINT_KEYS, STORAGE_PREFIX, StorageOptions, partial_id
from .retry import INIT_BACKOFF_S, MAX_BACKOFF_S, RetryBudget, write_conditionally

R = TypeVar("R")
_from_url: Callable[..., Any] = obstore.store.from_url  # typed per family; ours are checked

_CONFLICT_RE = re.compile(r"status code: 409\b")
_STATUS_RE = re.compile(r"status code: (\d{3})\b")
_TRANSIENT_4XX = frozenset({408, 409, 429})
_TRANSIENT_BODY_RE = re.compile(r"<Code>(RequestTimeout|SlowDown)</Code>")
_NOT_SENT_RE = re.compile(r"HTTP error: builder error")
NO_RETRY: dict[str, Any] = {"max_retries": 0}
READ_RETRIES_BACKSTOP = 1000
"""obstore needs a count; the budget (``retry_timeout``) is what bounds read retries."""


CONNECT_TIMEOUT_S = 5.0
"""obstore's own connect timeout: a root's default, unless a quarter of its budget is less."""


REQUEST_TIMEOUT_S = 30.0
"""obstore's own timeout of one request: a root's default, unless half its budget is less."""


def request_timeout_s(budget_s: float) -> float:
    """The timeout of one request of a root whose retry budget is ``budget_s`` (unless
    the ``timeout`` option or ``AWS_TIMEOUT`` sets one): obstore's 30 s, at most half
    the budget, so an endpoint that accepts a connection and never answers is tried
    again and given up on within the budget, as one that refuses connections is."""
    return min(REQUEST_TIMEOUT_S, budget_s / 2)


def connect_timeout_s(budget_s: float) -> float:
    """The connect timeout of a root whose retry budget is ``budget_s`` (unless the
    ``connect_timeout`` option or ``AWS_CONNECT_TIMEOUT`` sets one): obstore's 5 s, at
    most a quarter of the budget, so an endpoint that never accepts is tried a few
    times before the budget runs out."""
    return min(CONNECT_TIMEOUT_S, budget_s / 4)


def read_retry(timeout_s: float, connect_s: float | None = None) -> dict[str, Any]:
    """obstore's retries of every request but a conditional write: as many as fit in
    ``timeout_s`` (the root's one budget; the count is only a backstop), so a storm of
    transient errors on a read fails its caller only once the budget is spent, and a
    request nothing answers fails within it. obstore starts no retry once its own
    ``retry_timeout`` has passed, but one it starts just before still pauses up to
    ``max_backoff`` and may wait ``connect_s`` (the client's connect timeout) to
    connect: its ``retry_timeout`` is the budget less both."""
    connect = connect_timeout_s(timeout_s) if connect_s is None else connect_s
    max_backoff = min(MAX_BACKOFF_S, timeout_s / 8)
    return {
        "max_retries": READ_RETRIES_BACKSTOP,
        "backoff": {
            "init_backoff": timedelta(seconds=min(INIT_BACKOFF_S, max_backoff)),
            "max_backoff": timedelta(seconds=max_backoff),
        },
        "retry_timeout": timedelta(seconds=max(0.0, timeout_s - max_backoff - connect)),
    }


def _rejected(raw: str) -> bool:
    """Whether obstore's message shows a request that sending again cannot change."""
    if _NOT_SENT_RE.search(raw):
        return True
    m = _STATUS_RE.search(raw)
    if m is None:
        return False
    status = int(m.group(1))
    if status in (501, 505):
        return True
    return (
        400 <= status < 500 and status not in _TRANSIENT_4XX and not _TRANSIENT_BODY_RE.search(raw)
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _modified_ns(when: object) -> int | None:
    """obstore's ``last_modified`` (an aware datetime) in ns since the epoch."""
    if not isinstance(when, datetime):
        return None
    d = (when if when.tzinfo is not None else when.replace(tzinfo=UTC)) - _EPOCH
    return (d.days * 86400 + d.seconds) * 10**9 + d.microseconds * 1000


def _first_line(e: BaseException) -> str:
    text = str(e).split("\n\nDebug source", 1)[0]
    return " ".join(text.split())[:600]


# -- what a user's configuration did (one place; errors.StorageConfigError) ------------
_URI_RE = re.compile(r"Error performing ([A-Z]+) (\S+) in ")
_STATUS_LINE_RE = re.compile(r"status code: (\d{3}(?: [A-Z][A-Za-z]*)*)")
_CODE_RE = re.compile(r"<Code>(\w+)</Code>")
_BUCKET_NAME_RE = re.compile(r"<BucketName>([^<]+)</BucketName>")
_EXPECTING_RE = re.compile(r"expecting '([a-z0-9-]+)'")
_REGION_TAG_RE = re.compile(r"<Region>([a-z0-9-]+)</Region>")
_MAX_RETRIES_RE = re.compile(r"max_retries: (\d+)")
_AFTER_RE = re.compile(r"after (\d+) retries")
_UNANSWERED_RE = re.compile(r"error sending request|operation timed out|TimedOut")
_CONNECT_RE = re.compile(r"kind: Connect\b|Error\(\s*Connect,|ConnectError\(")
"""obstore's ``Debug source`` of a request whose connection failed (refused, host not
found, connect timed out), wherever the client noticed it."""
_IMDS_RE = re.compile(r"^/latest/(api/token|meta-data/)")
_BARE_REDIRECT = "Received redirect without LOCATION"
_REGION_KEYS = ("aws_region", "region", "aws_default_region", "default_region")
_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
_KEY_ID_KEYS = ("aws_access_key_id", "access_key_id")
_FALSE = frozenset({"false", "0", "no", "off", ""})


def _origin(uri: str) -> str:
    """``scheme://host[:port]`` of ``uri`` (no path, no credentials)."""
    parts = urlsplit(uri)
    if not parts.scheme or not parts.hostname:
        return uri
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}"


def _connect_reason(text: str) -> str | None:
    """What a failed connection met, None when ``text`` shows no connection failure."""
    if not _CONNECT_RE.search(text):
        return None
    if "ConnectionRefused" in text:
        return "connection refused"
    if '"dns error"' in text:
        return "host not found"
    if "TimedOut" in text:
        return "connect timed out"
    return "no connection"


def _unanswered(text: str) -> str | None:
    """What a request that was sent and never answered met (the endpoint accepted
    the connection and said nothing within the request timeout), None otherwise."""
    if _status(text) is None and _UNANSWERED_RE.search(text):
        return "connected, but no answer within the request timeout"
    return None


def _status(text: str) -> str | None:
    """``403 Forbidden`` from obstore's text, None when no answer came."""
    m = _STATUS_LINE_RE.search(text)
    return m.group(1) if m else None


def classify(
    e: BaseException,
    *,
    url: str,
    op: str,
    key: str,
    options: StorageOptions,
    family: str,
    seconds: float = 0.0,
    budget_s: float = 60.0,
    environ: Mapping[str, str] | None = None,
    option: str = "path",
) -> StorageConfigError | None:
    """The configuration mistake obstore's failure ``e`` shows, or None (a failure of
    the storage itself, transient or not: left as it was).

    ``url`` is the root as shown, ``op`` and ``key`` the request (``get``, ``STORE``;
    ``open`` for the client's construction), ``seconds`` how long the call took,
    ``budget_s`` the root's ``retry_timeout``; ``environ`` (``os.environ``) is where
    obstore read what no option set; ``option`` the option that named ``url`` (``path``,
    or ``segment.path`` for a segments location). Told apart by obstore's text (its first line and
    the ``Debug source`` after it: the request's URI, the answer's status and body, the
    connection error): no credentials (the instance metadata service was asked, or one
    half of a key pair is set), plain http refused, nothing answering after the
    retries (a connection failure, never a single attempt of a write: those are
    retried by :mod:`.retry`), and on S3 a missing bucket, another region and a 401/403
    (its S3 error code says which credential is wrong). Every message names what to
    set and shows no secret: the access key id only partially."""
    text = str(e)
    env = os.environ if environ is None else environ
    m = _URI_RE.search(text)
    uri = m.group(2) if m else ""
    endpoint = options.scrub(_origin(uri)) if uri else ""
    request = f"{op} {key}"
    prefix = {"s3": "aws_", "gcs": "google_", "azure": "azure_"}.get(family, "")
    groups = ENDPOINT_KEYS.get(family, ())
    where = options.setting(*groups[0], environ=env) if groups else None
    endpoint_setting = where[0] if where else f"{STORAGE_PREFIX}{prefix}endpoint"
    if family == "s3":
        if "Missing SecretAccessKey" in text:
            return NoCredentialsError(
                url,
                given="storage.aws_access_key_id",
                missing="storage.aws_secret_access_key",
            )
        if "Missing AccessKeyId" in text:
            return NoCredentialsError(
                url,
                given="storage.aws_secret_access_key",
                missing="storage.aws_access_key_id",
            )
        if uri and _IMDS_RE.match(urlsplit(uri).path):
            reason = _connect_reason(text)
            status = _status(text)
            answer = f"answered {status}" if status else f"did not answer ({reason or 'no answer'})"
            return NoCredentialsError(url, metadata=endpoint, answer=answer)
    if "BadScheme" in text and uri.startswith("http://"):
        allow = f"{STORAGE_PREFIX}{prefix}allow_http"
        note = ""
        given = options.setting((f"{prefix}allow_http", "allow_http"), (), env)
        env_name = f"{prefix.upper()}ALLOW_HTTP"
        if given is not None and given[1].strip().lower() in _FALSE:
            note = f" ({given[0]} is {given[1]!r})"
        elif env_name in env and env[env_name].strip().lower() in _FALSE:
            note = f" (the environment sets {env_name}={env[env_name]})"
        return HttpNotAllowedError(url, endpoint=endpoint, setting=allow, note=note)
    reason = _connect_reason(text) or _unanswered(text)
    retries = _MAX_RETRIES_RE.search(text)
    if reason is not None and retries is not None and int(retries.group(1)) > 0:
        after = _AFTER_RE.search(text)
        return EndpointUnreachableError(
            url,
            endpoint=endpoint,
            setting=endpoint_setting,
            request=request,
            reason=reason,
            attempts=int(after.group(1)) + 1 if after else 1,
            seconds=seconds,
            budget_s=budget_s,
        )
    if family != "s3":
        return None
    code_m = _CODE_RE.search(text)
    code = code_m.group(1) if code_m else ""
    bucket = urlsplit(url).hostname or ""
    if code == "NoSuchBucket":
        named = _BUCKET_NAME_RE.search(text)
        return NoSuchBucketError(
            url,
            bucket=named.group(1) if named else bucket,
            endpoint=endpoint,
            endpoint_setting=endpoint_setting,
            option=option,
        )
    malformed = code == "AuthorizationHeaderMalformed" and _EXPECTING_RE.search(text)
    if _BARE_REDIRECT in text or code == "PermanentRedirect" or malformed:
        expected = _EXPECTING_RE.search(text) or _REGION_TAG_RE.search(text)
        region = options.setting(_REGION_KEYS, _REGION_ENV, env)
        return WrongRegionError(
            url,
            bucket=bucket,
            region=region[1] if region else "us-east-1",
            region_from=f"set by {region[0]}" if region else "the default",
            expected=expected.group(1) if expected else None,
        )
    status = _status(text)
    denied = isinstance(e, PermissionDeniedError | UnauthenticatedError)
    if denied or (status is not None and status[:3] in ("401", "403")):
        key_id = options.setting(_KEY_ID_KEYS, ("AWS_ACCESS_KEY_ID",), env)
        return AccessDeniedError(
            url,
            request=request,
            status=int(status[:3]) if status else 403,
            code=code,
            key_id=partial_id(key_id[1]) if key_id else None,
        )
    return None


def _is_panic(e: BaseException) -> bool:
    """Whether ``e`` is the exception pyo3 raises for a panic inside obstore."""
    return type(e).__name__ == "PanicException"


class CloudObjects(ObjectStore):
    """A root in a cloud bucket (or a ``segment.path`` there: ``option``, the option
    that named ``url`` in messages). ``store`` (an obstore store, e.g. ``MemoryStore()``)
    replaces the one ``url`` would open; ``url`` is then only how messages show it."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, object] | None = None,
        *,
        store: Any = None,
        retry: Mapping[str, Any] | None = None,
        budget: RetryBudget | None = None,
        option: str = "path",
    ) -> None:
        """``retry``: obstore's retry config of every request but the conditional
        writes; ``budget``: how those are retried (default: from the options)."""
        self.options = StorageOptions(storage_options)
        self.option = option
        self.url = self.options.scrub(url.rstrip("/"))
        self.family = object_family(url) or ""
        if store is not None:
            self.budget = budget or RetryBudget()
            self._store = self._cond = store
            return
        self.budget = budget or RetryBudget(timeout_s=self.options.retry_timeout_s)
        default_connect = connect_timeout_s(self.budget.timeout_s)
        default_request = request_timeout_s(self.budget.timeout_s)
        config, client = self.options.split(
            self.family,
            client_defaults={
                "connect_timeout": f"{default_connect * 1000:.0f}ms",
                "timeout": f"{default_request * 1000:.0f}ms",
            },
        )
        self.options.check_endpoints(self.url, self.family)
        try:
            connect = parse_duration("connect_timeout", client.get("connect_timeout", ""))
        except ConfigError:
            connect = default_connect  # obstore refuses the value below
        reads = retry or read_retry(self.budget.timeout_s, connect)
        try:
            self._store = _from_url(url, config=config, client_options=client, retry_config=reads)
            self._cond = _from_url(url, config=config, client_options=client, retry_config=NO_RETRY)
        except (BaseError, ValueError) as e:
            err = self._classified("open", "", e, 0.0)
            if err is not None:
                raise err from None
            raise ConfigError(
                self.option,
                self.url,
                f"a location obstore can open with the storage options given "
                f"{self.options!s}: {self.options.scrub(_first_line(e))}",
            ) from None

    def __repr__(self) -> str:
        return f"CloudObjects({self.url!r}, {self.options!r})"

    # -- versions -----------------------------------------------------------------
    def _version(self, e_tag: str | None, version: str | None) -> str:
        if self.family == "gcs" and version:
            return f"{e_tag or ''}#{version}"
        return e_tag or version or ""

    def _mode(self, version: str) -> dict[str, str]:
        if self.family == "gcs" and "#" in version:
            e_tag, _, generation = version.rpartition("#")
            return {"e_tag": e_tag, "version": generation}
        return {"e_tag": version}

    # -- errors -------------------------------------------------------------------
    def _classified(
        self, op: str, key: str, e: BaseException, seconds: float
    ) -> StorageConfigError | None:
        return classify(
            e,
            url=self.url,
            op=op,
            key=key,
            options=self.options,
            family=self.family,
            seconds=seconds,
            budget_s=self.budget.timeout_s,
            option=self.option,
        )

    def _fail(self, op: str, key: str, e: BaseException, seconds: float = 0.0) -> NoReturn:
        shown = self.display(key)
        raw = _first_line(e)
        msg = self.options.scrub(raw)
        # a chained message must not show a secret
        cause = e if self.options.scrub(str(e)) == str(e) else None
        if not isinstance(e, AlreadyExistsError | PreconditionError):
            err = self._classified(op, key, e, seconds)
            if err is not None:
                raise err from cause
        if isinstance(e, AlreadyExistsError | PreconditionError) and _CONFLICT_RE.search(raw):
            raise ObjectConflict(
                shown,
                f"{op} {shown}: another conditional write of the key was in progress "
                f"(409, nothing written; retry): {msg}",
            ) from cause
        if isinstance(e, AlreadyExistsError):
            raise ObjectExists(shown, "already exists") from cause
        if isinstance(e, PreconditionError):
            raise VersionMismatch(shown, "is not at the version given") from cause
        message = f"{op} {shown} failed: {msg}"
        if isinstance(e, PermissionDeniedError | UnauthenticatedError):
            raise RequestForbidden(op, shown, message) from cause
        if isinstance(e, FileNotFoundError):
            raise ObjectNotFound(shown, message) from cause
        if _rejected(raw):
            raise RequestRejected(shown, message) from cause
        raise RequestFailed(op, shown, message) from cause

    def _call(self, op: str, key: str, fn: Callable[[], R]) -> R:
        started = time.monotonic()
        try:
            return fn()
        except FileNotFoundError as e:  # the key, or the bucket (NoSuchBucketError)
            err = self._classified(op, key, e, time.monotonic() - started)
            if err is not None:
                raise err from None
            raise
        except (BaseError, OSError, ValueError) as e:
            self._fail(op, key, e, time.monotonic() - started)
        except BaseException as e:
            if not _is_panic(e):
                raise
            raise RequestRejected(
                self.display(key),
                f"{op} {self.display(key)} failed: the storage client gave up "
                f"(obstore panicked: {self.options.scrub(_first_line(e))}); check the "
                f"storage options {self.options!s}",
            ) from None

    # -- the primitives -----------------------------------------------------------
    def get(self, key: str) -> Stored | None:
        def run() -> Stored:
            got = obstore.get(self._store, key)
            data = bytes(got.bytes())
            meta = got.meta
            return Stored(
                data,
                self._version(meta.get("e_tag"), meta.get("version")),
                _modified_ns(meta.get("last_modified")),
            )

        try:
            return self._call("get", key, run)
        except FileNotFoundError:
            return None

    def head(self, key: str) -> str | None:
        info = self.info(key)
        return None if info is None else info.version

    def info(self, key: str) -> ObjectInfo | None:
        """Size and version of ``key`` (one ``HEAD``), None when absent."""
        try:
            meta = self._call("head", key, lambda: obstore.head(self._store, key))
        except FileNotFoundError:
            return None
        return ObjectInfo(
            key,
            int(meta["size"]),
            self._version(meta.get("e_tag"), meta.get("version")),
            _modified_ns(meta.get("last_modified")),
        )

    def _put(self, op: str, key: str, data: bytes, mode: Any, store: Any) -> str:
        try:
            got = self._call(op, key, lambda: obstore.put(store, key, bytes(data), mode=mode))
        except FileNotFoundError as e:  # a store that reports If-Match on a missing key so
            if op == "replace":
                raise VersionMismatch(self.display(key), "does not exist") from None
            self._fail(op, key, e)
        return self._version(got.get("e_tag"), got.get("version"))

    def create(self, key: str, data: bytes) -> str:
        return write_conditionally(
            "create",
            self.display(key),
            data,
            lambda: self._put("create", key, data, "create", self._cond),
            lambda: self.get(key),
            self.budget,
        )

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        mode = self._mode(version)
        return write_conditionally(
            "replace",
            self.display(key),
            data,
            lambda: self._put("replace", key, data, mode, self._cond),
            lambda: self.get(key),
            self.budget,
        )

    def put(self, key: str, data: bytes) -> str:
        return self._put("put", key, data, "overwrite", self._store)

    def delete(self, key: str) -> None:
        try:
            self._call("delete", key, lambda: obstore.delete(self._store, key))
        except FileNotFoundError:
            return

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""

        def run() -> list[ObjectInfo]:
            stream = obstore.list(self._store, prefix=directory or None, offset=after)
            out = []
            for page in stream:
                for m in page:
                    k = str(m["path"])
                    if k.startswith(prefix) and (after is None or k > after):
                        out.append(
                            ObjectInfo(
                                k,
                                int(m["size"]),
                                self._version(m.get("e_tag"), m.get("version")),
                                _modified_ns(m.get("last_modified")),
                            )
                        )
            return out

        try:
            found = self._call("list", prefix, run)
        except FileNotFoundError:
            return []
        found.sort(key=lambda i: i.key)
        return found

    def list_level(self, prefix: str) -> Level:
        check_directory(prefix)

        def run() -> Level:
            got = obstore.list_with_delimiter(self._store, prefix=prefix.rstrip("/") or None)
            names = (str(p)[len(prefix) :].strip("/") for p in got["common_prefixes"])
            objects = [
                ObjectInfo(
                    str(m["path"]),
                    int(m["size"]),
                    self._version(m.get("e_tag"), m.get("version")),
                    _modified_ns(m.get("last_modified")),
                )
                for m in got["objects"]
                if str(m["path"]).startswith(prefix) and "/" not in str(m["path"])[len(prefix) :]
            ]
            objects.sort(key=lambda i: i.key)
            return Level(sorted({n for n in names if n and "/" not in n}), objects)

        try:
            return self._call("list", prefix, run)
        except FileNotFoundError:
            return Level([], [])

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        check_directory(prefix)

        def run() -> list[str]:
            got = obstore.list_with_delimiter(self._store, prefix=prefix.rstrip("/") or None)
            names = (str(p)[len(prefix) :].strip("/") for p in got["common_prefixes"])
            return sorted({n for n in names if n and "/" not in n})

        try:
            return self._call("list", prefix, run)
        except FileNotFoundError:
            return []
