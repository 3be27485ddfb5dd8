"""Location strings: which store roots and segments locations are usable, and the fix
for those that are not (ARCHITECTURE.md §1, §5).

A store root is a local POSIX directory or ``file://`` URL (:func:`local_path`); a
segments location is that or any ``scheme://...`` URL whose fsspec implementation is
installed (:func:`check_url`). Each refusal is a :class:`ConfigError` naming the option,
the value and what to write instead (an install hint for a missing backend). Nothing
here touches a file.
"""

from __future__ import annotations

import os
import re

import fsspec
from fsspec.registry import known_implementations

from ..errors import ConfigError

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.S)
LOCAL_SCHEMES = ("file", "local")

EXTRAS = {"s3": "s3", "s3a": "s3"}
"""fsspec protocols whose backend one of this package's extras installs."""

COMMON_SCHEMES = "s3://, s3a://, gs://, abfs://, az://, hdfs://, memory://, file://"


def _install_hint(protocol: str) -> str:
    """What to install for ``protocol``, e.g. ``s3fs; run: pip install 'quiver-spark[s3]'``."""
    known = known_implementations.get(protocol, {})
    package = str(known.get("class") or "").split(".")[0]  # "gcsfs.GCSFileSystem"
    extra = EXTRAS.get(protocol)
    if extra is not None:
        return f"{package or 's3fs'}; run: pip install 'quiver-spark[{extra}]'"
    if package and package != "fsspec":
        return f"{package}; run: pip install {package}"
    return str(known.get("err") or f"the fsspec implementation of {protocol}://")


OBJECT_ROOT_SCHEMES = ("s3", "gs", "az", "abfs", "abfss")
"""Schemes named in messages about a store root besides a local path (ARCHITECTURE.md
§12); the full set, with aliases and the engine's ``memory://``, is
:func:`quiver_spark.objects.urls.object_scheme`'s."""


def root_location(option: str, value: object) -> str:
    """A store root: an object-store URL (``s3://bucket/prefix``) as given without a
    trailing slash, or a local path made absolute (:func:`local_path`).

    >>> root_location("path", "s3://bucket/store/")
    's3://bucket/store'
    """
    from ..objects.urls import object_scheme

    raw = str(value).strip() if value is not None else ""
    m = _SCHEME_RE.match(raw)
    if m is None or m.group(1).lower() in LOCAL_SCHEMES:
        return local_path(option, value)
    scheme, rest = m.group(1).lower(), m.group(2)
    if object_scheme(raw) is None:
        raise ConfigError(
            option,
            value,
            "a local directory, a file:// URL or an object-store URL ("
            + ", ".join(f"{s}://bucket/prefix" for s in OBJECT_ROOT_SCHEMES)
            + f"){_scheme_hint(scheme, rest)}",
        )
    authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
    if "@" in authority:  # never echo it: the part before '@' is a credential
        raise ConfigError(
            option,
            f"{scheme}://***@{authority.rsplit('@', 1)[1]}/...",
            "a URL without credentials in it: give them as storage options "
            "(Spark: option storage.aws_access_key_id / storage.aws_secret_access_key; "
            "CLI: -S KEY=VALUE; or the environment)",
        )
    bucket = authority
    if not bucket:
        raise ConfigError(
            option, value, f"a URL with a bucket after {scheme}://, e.g. {scheme}://bucket/store"
        )
    return f"{scheme}:{rest}".rstrip("/")


def is_object_root(root: str) -> bool:
    """Whether ``root`` (from :func:`root_location`) is on an object store."""
    from ..objects.urls import object_scheme

    return object_scheme(root) is not None


def local_path(option: str, value: object) -> str:
    """A local POSIX path from ``value``: a path or a ``file://`` URL, made absolute.

    >>> local_path("path", "file:///data/q")
    '/data/q'

    Raises
    ------
    ConfigError
        For any other URL (``s3://...``), a scheme without ``//`` (``dbfs:/mnt/q``,
        which would otherwise become a relative directory named ``dbfs:``) or an
        empty value; the message says what to write instead.
    """
    raw = str(value).strip() if value is not None else ""
    if not raw:
        raise ConfigError(option, value, "a local directory")
    m = _SCHEME_RE.match(raw)
    if m is not None:
        scheme, rest = m.group(1).lower(), m.group(2)
        if scheme not in LOCAL_SCHEMES:
            hint = _scheme_hint(scheme, rest)
            raise ConfigError(option, value, f"a local POSIX directory or file:// URL{hint}")
        raw = _file_url_path(option, value, rest)
    return os.path.abspath(os.path.expanduser(raw))


def _file_url_path(option: str, value: object, rest: str) -> str:
    """The path of ``file:<rest>``: ``file:///x`` and ``file:/x`` give ``/x``."""
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost") or not slash:
            raise ConfigError(
                option, value, "a file URL of this machine: file:///absolute/path (three slashes)"
            )
        return "/" + path
    if rest.startswith("/"):
        return rest
    raise ConfigError(option, value, "a file URL with an absolute path: file:///absolute/path")


def _scheme_hint(scheme: str, rest: str) -> str:
    if scheme == "dbfs" and not rest.startswith("//"):
        return f"; on Databricks use the DBFS mount /dbfs{rest if rest.startswith('/') else '/' + rest}"
    return ""


def check_url(option: str, value: object) -> str:
    """Validate a segments location before anything is written there; returns it as given.

    A local path or ``file://`` URL, or a well-formed ``scheme://...`` URL whose fsspec
    backend is importable. Everything else raises :class:`ConfigError` naming the fix:
    a missing backend (``s3://`` without s3fs: ``pip install 'quiver-spark[s3]'``), an
    unknown scheme, a scheme without ``//`` (``dbfs:/mnt/q``) or a URL with nothing
    after the scheme (``s3://``).
    """
    raw = str(value).strip() if value is not None else ""
    if not raw:
        raise ConfigError(option, value, "a local path or a URL such as s3://bucket/prefix")
    m = _SCHEME_RE.match(raw)
    if m is None:
        return raw  # a local path
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme in LOCAL_SCHEMES:
        local_path(option, value)
        return raw
    if not rest.startswith("//"):
        raise ConfigError(
            option,
            value,
            f"a local path or a URL written scheme://... (e.g. {scheme}:/{rest}){_scheme_hint(scheme, rest)}"
            if rest.startswith("/")
            else f"a local path or a URL written scheme://...{_scheme_hint(scheme, rest)}",
        )
    if not rest[2:].strip("/"):
        raise ConfigError(
            option, value, f"a URL with a location after {scheme}://, e.g. s3://bucket/prefix"
        )
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError:
        raise ConfigError(
            option,
            value,
            f"a URL whose filesystem is installed ({scheme}:// needs {_install_hint(scheme)})",
        ) from None
    except ValueError:
        raise ConfigError(
            option,
            value,
            f"a local path or a URL of a known fsspec filesystem ({COMMON_SCHEMES}); "
            f"{scheme}:// is none of them",
        ) from None
    return raw


def is_local_url(url: str) -> bool:
    """Whether the segments location ``url`` (already accepted by :func:`check_url`) is a
    local directory: a path without a scheme or a ``file://``/``local://`` URL."""
    m = _SCHEME_RE.match(url.strip())
    return m is None or m.group(1).lower() in LOCAL_SCHEMES
