"""Objects in S3, GCS or Azure Blob through obstore (ARCHITECTURE.md §12.1).

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
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from ..errors import ConfigError, ObjectConflict, ObjectExists, RequestRejected, VersionMismatch
from ..urls import object_family
from .base import ObjectInfo, ObjectStore, Stored, check_directory
from .options import StorageOptions
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


def read_retry(timeout_s: float) -> dict[str, Any]:
    """obstore's retries of every request but a conditional write: as many as fit in
    ``timeout_s`` (the root's one budget; the count is only a backstop), so a storm of
    transient errors on a read fails its caller only once the budget is spent."""
    return {
        "max_retries": READ_RETRIES_BACKSTOP,
        "backoff": {
            "init_backoff": timedelta(seconds=INIT_BACKOFF_S),
            "max_backoff": timedelta(seconds=MAX_BACKOFF_S),
        },
        "retry_timeout": timedelta(seconds=timeout_s),
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


class CloudObjects(ObjectStore):
    """A root in a cloud bucket. ``store`` (an obstore store, e.g. ``MemoryStore()``)
    replaces the one ``url`` would open; ``url`` is then only how messages show it."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, object] | None = None,
        *,
        store: Any = None,
        retry: Mapping[str, Any] | None = None,
        budget: RetryBudget | None = None,
    ) -> None:
        """``retry``: obstore's retry config of every request but the conditional
        writes; ``budget``: how those are retried (default: from the options)."""
        self.options = StorageOptions(storage_options)
        self.url = self.options.scrub(url.rstrip("/"))
        self.family = object_family(url) or ""
        if store is not None:
            self.budget = budget or RetryBudget()
            self._store = self._cond = store
            return
        config, client = self.options.split(self.family)
        self.budget = budget or RetryBudget(timeout_s=self.options.retry_timeout_s)
        reads = retry or read_retry(self.budget.timeout_s)
        inherit = client or None  # None: obstore takes the environment's client settings
        try:
            self._store = _from_url(url, config=config, client_options=inherit, retry_config=reads)
            self._cond = _from_url(
                url, config=config, client_options=inherit, retry_config=NO_RETRY
            )
        except (BaseError, ValueError) as e:
            raise ConfigError(
                "path",
                self.url,
                f"a root obstore can open with the storage options given "
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
    def _fail(self, op: str, key: str, e: BaseException) -> NoReturn:
        shown = self.display(key)
        raw = _first_line(e)
        msg = self.options.scrub(raw)
        cause = e if msg == raw else None  # a chained message must not show a secret
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
            raise PermissionError(message) from cause
        if isinstance(e, FileNotFoundError):
            raise FileNotFoundError(message) from cause
        if _rejected(raw):
            raise RequestRejected(shown, message) from cause
        raise OSError(message) from cause

    def _call(self, op: str, key: str, fn: Callable[[], R]) -> R:
        try:
            return fn()
        except FileNotFoundError:
            raise
        except (BaseError, OSError, ValueError) as e:
            self._fail(op, key, e)

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
