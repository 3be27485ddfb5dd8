"""Locations by URL: every scheme Quiver knows, what each one names, and the fix for a
location that is not usable (ARCHITECTURE.md §1, §5, §2). Nothing here touches a file
or opens a client; every other module asks this one what a location is.

A store root is a local POSIX directory or ``file://`` URL (:func:`local_path`), or an
object-store URL (:func:`root_location`), opened by
:func:`~quiver_spark.objects.roots.open_objects`. A segments location
(``segment.path``, beside a local root) is a local path, an object-store URL (the same
client as a root there: obstore, or the engine's in-process store for ``memory://``)
or any other ``scheme://...`` URL whose fsspec implementation is installed
(:func:`check_url`, :func:`segments_client`). Each refusal is a :class:`ConfigError`
naming the option, the value and what to write instead (an install hint for a missing
fsspec backend).

:data:`SCHEMES` says what each scheme names; one client serves a scheme wherever it
appears:

=========================  =====================  ===========================
scheme                     a store root there     a ``segment.path`` there
=========================  =====================  ===========================
``s3`` ``s3a``             obstore, family s3     obstore, family s3
``gs`` ``gcs``             obstore, family gcs    obstore, family gcs
``az`` ``abfs`` ``abfss``  obstore, family azure  obstore, family azure
``memory``                 the in-process store   the in-process store
``file`` ``local``         a local directory      a local directory
any other (``hdfs``...)    refused                fsspec, when installed
=========================  =====================  ===========================
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import fsspec
from fsspec.registry import known_implementations

from .errors import ConfigError

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.S)
"""``scheme:rest``; a URL proper has ``rest`` starting with ``//``."""

LOCAL = "local"
"""The kind of root, and the client of a segments location, of a POSIX directory
(:attr:`Scheme.root`, :attr:`Scheme.segments`)."""
OBJECTS = "objects"
"""The client of a segments location on an object store: the one a root there opens
(:func:`~quiver_spark.objects.roots.open_objects`), with the same storage options:
obstore, or the engine's in-process store for ``memory://``."""
FSSPEC = "fsspec"
"""The client of any other segments location: the fsspec filesystem of its scheme."""


@dataclass(frozen=True)
class Scheme:
    """What a URL scheme names."""

    root: str | None
    """The kind of store root there: :data:`LOCAL` (a POSIX directory), the object
    store client family (``s3``, ``gcs``, ``azure``) or ``memory`` (the engine's
    in-process store); None: no store root may be there."""
    segments: str = FSSPEC
    """The client of a ``segment.path`` there: :data:`LOCAL`, :data:`OBJECTS` or
    :data:`FSSPEC` (also every scheme not in :data:`SCHEMES`)."""
    named_in: tuple[str, ...] = ()
    """The messages that name it as an example: ``root`` (what a store root may be),
    ``family`` (whose storage options a root of its family takes), ``segments`` (what
    a ``segment.path`` may be)."""


SCHEMES: dict[str, Scheme] = {
    "s3": Scheme("s3", OBJECTS, ("root", "family", "segments")),
    "s3a": Scheme("s3", OBJECTS, ("segments",)),
    "gs": Scheme("gcs", OBJECTS, ("root", "family", "segments")),
    "gcs": Scheme("gcs", OBJECTS),
    "az": Scheme("azure", OBJECTS, ("root", "family", "segments")),
    "abfs": Scheme("azure", OBJECTS, ("root", "family", "segments")),
    "abfss": Scheme("azure", OBJECTS, ("root",)),
    "hdfs": Scheme(None, FSSPEC, ("segments",)),
    "memory": Scheme("memory", OBJECTS, ("segments",)),
    "file": Scheme(LOCAL, LOCAL, ("segments",)),
    "local": Scheme(LOCAL, LOCAL),
}
"""Every scheme Quiver names, in the order messages list them (module docstring)."""

FAMILIES: dict[str, str] = {
    s: row.root for s, row in SCHEMES.items() if row.root is not None and row.root != LOCAL
}
"""Object-store URL schemes and the client family each one uses."""

LOCAL_SCHEMES = tuple(s for s, row in SCHEMES.items() if row.root == LOCAL)
"""Schemes of a local directory: ``file://`` and ``local://``."""

OBJECT_ROOT_SCHEMES = tuple(s for s, row in SCHEMES.items() if "root" in row.named_in)
"""Schemes named in messages about a store root besides a local path; the full set,
with aliases and the engine's ``memory://``, is :data:`FAMILIES`."""

COMMON_SCHEMES = ", ".join(f"{s}://" for s, row in SCHEMES.items() if "segments" in row.named_in)
"""The URLs a message about ``segment.path`` names as examples."""


def _split(value: object) -> tuple[str, str] | None:
    """``(scheme lower-cased, rest)`` of ``value`` stripped, None without a scheme."""
    m = _SCHEME_RE.match(str(value).strip())
    return None if m is None else (m.group(1).lower(), m.group(2))


def family_schemes(family: str) -> str:
    """How messages name the URLs of a client family: ``az:// and abfs://``."""
    return " and ".join(
        f"{s}://" for s, row in SCHEMES.items() if row.root == family and "family" in row.named_in
    )


def object_scheme(url: str) -> str | None:
    """The lower-cased scheme of ``url`` when it names an object root, else None."""
    split = _split(url)
    if split is None or not split[1].startswith("//"):
        return None
    return split[0] if split[0] in FAMILIES else None


def object_family(url: str) -> str | None:
    """The client family of object root ``url`` (``s3``, ``gcs``, ``azure``,
    ``memory``), None when ``url`` is no object-store URL."""
    scheme = object_scheme(url)
    return None if scheme is None else FAMILIES[scheme]


def is_object_url(path: object) -> bool:
    """Whether ``path`` is an object-store URL (``s3://``, ``s3a://``, ``gs://``,
    ``gcs://``, ``az://``, ``abfs://``, ``abfss://``, ``memory://``) rather than a local
    path or ``file://`` URL; for a root from :func:`root_location`, whether the store is
    on an object store."""
    return object_scheme(str(path)) is not None


is_object_root = is_object_url


class StoreRoot(str):
    """A store root :func:`root_location` made: handed to it again (by the store's
    open, after the Spark layer or the CLI resolved it), it is taken as it is, so a
    handle parses its root once."""

    __slots__ = ()


def root_location(option: str, value: object) -> str:
    """A store root: an object-store URL (``s3://bucket/prefix``) as given without a
    trailing slash, or a local path made absolute (:func:`local_path`); a
    :class:`StoreRoot` (what this returns) as it is.

    >>> root_location("path", "s3://bucket/store/")
    's3://bucket/store'
    """
    if isinstance(value, StoreRoot):
        return value
    return StoreRoot(_parse_root(option, value))


def _parse_root(option: str, value: object) -> str:
    raw = str(value).strip() if value is not None else ""
    split = _split(raw)
    if split is None or split[0] in LOCAL_SCHEMES:
        return local_path(option, value)
    scheme, rest = split
    if object_scheme(raw) is None:
        raise ConfigError(
            option,
            value,
            "a local directory, a file:// URL or an object-store URL ("
            + ", ".join(f"{s}://bucket/prefix" for s in OBJECT_ROOT_SCHEMES)
            + f"){_scheme_hint(scheme, rest)}",
        )
    _check_bucket(option, value, scheme, rest, "store")
    return f"{scheme}:{rest}".rstrip("/")


def _check_bucket(option: str, value: object, scheme: str, rest: str, example: str) -> None:
    """Refuse an object-store URL ``scheme:rest`` with credentials in it or no bucket
    (a root and a ``segment.path`` alike; ``example``: the prefix a message shows)."""
    authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
    userinfo = authority.rpartition("@")[0]
    if userinfo and FAMILIES.get(scheme) == "azure" and ":" not in userinfo:
        userinfo = ""  # Azure's <container>@<account>.dfs.core.windows.net: no credential
    if userinfo:  # never echo it: the part before '@' is a credential
        raise ConfigError(
            option,
            f"{scheme}://***@{authority.rsplit('@', 1)[1]}/...",
            "a URL without credentials in it: give them as storage options "
            "(Spark: option storage.aws_access_key_id / storage.aws_secret_access_key; "
            "CLI: -S KEY=VALUE; or the environment)",
        )
    if not authority:
        raise ConfigError(
            option,
            value,
            f"a URL with a bucket after {scheme}://, e.g. {scheme}://bucket/{example}",
        )


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
    split = _split(raw)
    if split is not None:
        scheme, rest = split
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


def _install_hint(protocol: str) -> str:
    """What to install for fsspec ``protocol``, e.g. ``ocifs; run: pip install ocifs``."""
    known = known_implementations.get(protocol, {})
    package = str(known.get("class") or "").split(".")[0]  # "ocifs.OCIFileSystem"
    if package and package != "fsspec":
        return f"{package}; run: pip install {package}"
    return str(known.get("err") or f"the fsspec implementation of {protocol}://")


def check_url(option: str, value: object) -> str:
    """Validate a segments location before anything is written there; returns it as given.

    A local path or ``file://`` URL, an object-store URL with a bucket and no credentials
    (as a root's, :func:`root_location`), or a well-formed ``scheme://...`` URL whose
    fsspec backend is importable. Everything else raises :class:`ConfigError` naming the
    fix: a missing fsspec backend (``oci://`` without ocifs: ``pip install ocifs``), an
    unknown scheme, a scheme without ``//`` (``dbfs:/mnt/q``) or a URL with nothing
    after the scheme (``s3://``).
    """
    raw = str(value).strip() if value is not None else ""
    if not raw:
        raise ConfigError(option, value, "a local path or a URL such as s3://bucket/prefix")
    split = _split(raw)
    if split is None:
        return raw  # a local path
    scheme, rest = split
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
    if segments_client(raw) == OBJECTS:
        _check_bucket(option, value, scheme, rest, "segments")
        return raw
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
            f"a local path, an object-store URL or a URL of a known fsspec filesystem "
            f"({COMMON_SCHEMES}); {scheme}:// is none of them",
        ) from None
    return raw


def segments_client(url: str) -> str:
    """The client of the segments location ``url`` (accepted by :func:`check_url`):
    :data:`LOCAL` for a path without a scheme or a ``file://``/``local://`` URL,
    :data:`OBJECTS` for an object-store URL (``s3://``, ``gs://``, ``az://``...: obstore;
    ``memory://``: the in-process store; as a root there), :data:`FSSPEC` for any other
    (``hdfs://``...)."""
    split = _split(url)
    if split is None:
        return LOCAL
    row = SCHEMES.get(split[0])
    return FSSPEC if row is None else row.segments


def is_local_url(url: str) -> bool:
    """Whether the segments location ``url`` (already accepted by :func:`check_url`) is a
    local directory: a path without a scheme or a ``file://``/``local://`` URL."""
    return segments_client(url) == LOCAL


def location_key(url: str) -> str:
    """A segments location in a form two spellings of the same place share."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" in url:
        return url.rstrip("/")
    return os.path.normpath(os.path.abspath(url))
