"""Store options as given (Spark options, a YAML file, the CLI) to a typed StoreConfig.

Options are matched under any case (:func:`canonicalize`), sources are layered
(:func:`overlay`, :func:`merged_options`), and each value is parsed by its entry in the
option table (:mod:`quiver_spark.option_table`, which holds every option's name,
default, parser and meaning). Every error names the option as given, the value given and
what is allowed. A front end (the Spark data source, the CLI) parses its options with
what this module exports, a root (option ``path``) with :func:`root_location` and a
location it must reach with :func:`check_url`. Which source of a setting wins (explicit
options, the store profile, the environment) is stated once, by :func:`merged_options`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import option_table as o
from .config import RetentionConfig, SegmentConfig, StoreConfig, WalConfig, validate_name
from .errors import ConfigError, StoreProfileError, UnknownOptionError, UnknownProfileOptionError
from .objects.options import ANY_ROOT_KEYS, STORAGE_PREFIX, near_storage_keys
from .option_table import (
    OPTION,
    STORAGE_OPTION_TABLE,
    STORE_OPTION_TABLE,
    STORE_OPTIONS,
    Option,
)
from .urls import check_url, root_location
from .values import (
    DURATION_ALLOWED,
    SIZE_ALLOWED,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    parse_size,
)

__all__ = [
    "DURATION_ALLOWED",
    "QUIVER_CONFIG",
    "SIZE_ALLOWED",
    "STORAGE_OPTION_TABLE",
    "STORE_OPTIONS",
    "STORE_OPTION_TABLE",
    "Option",
    "StoreConfig",
    "canonical_option",
    "canonicalize",
    "check_url",
    "did_you_mean",
    "flatten",
    "load_profile",
    "load_yaml_options",
    "merged_options",
    "overlay",
    "parse_bool",
    "parse_choice",
    "parse_duration",
    "parse_int",
    "parse_size",
    "profile_named",
    "root_location",
    "store_config_from_options",
    "validate_name",
    "validate_partition",
]

_PREFIXES = ("segment.", "segments.", "wal.", "retention.", "subscriber.")
"""The store's namespaces: an unknown key under one of them is refused, never ignored
(``segments.`` too, a common misspelling of ``segment.``)."""


def canonical_option(key: str) -> str | None:
    """The canonical name of store option ``key`` (in any case), else None."""
    k = key.strip().lower()
    for name in STORE_OPTIONS:
        if name.lower() == k:
            return name
    return None


def canonicalize(options: Mapping[str, Any], names: dict[str, str] | None = None) -> dict[str, Any]:
    """Store option keys under their canonical names (other keys unchanged). Used
    before merging sources of options (YAML, explicit), so an explicit option wins over
    the same option spelled in another case in a file; one option given twice with two
    values is refused."""
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in options.items():
        name = canonical_option(str(key))
        if name is None:
            out[key] = value
            continue
        if name in out and str(out[name]) != str(value):
            raise ConfigError(
                str(key), value, f"one value: {seen[name]!r} (the same option) says {out[name]!r}"
            )
        out[name] = value
        seen[name] = str(key)
        if names is not None:
            names[name] = str(key)
    return out


def overlay(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` over it, where a store option or a storage key in ``top``
    replaces the same setting in ``base`` under any spelling (an explicit option wins over
    a file's): a case, or for a storage key the family prefix and the endpoint's aliases
    (``storage.allow_http`` replaces ``storage.AWS_ALLOW_HTTP``)."""
    winners = {_setting_of(k) for k in top} - {None}
    out = {k: v for k, v in base.items() if _setting_of(k) not in winners}
    out.update(top)
    return out


def _setting_of(key: object) -> str | None:
    """What option ``key`` sets, whatever its spelling: a store option's canonical name,
    ``storage.<key>`` without its family prefix, else None."""
    name = canonical_option(str(key))
    if name is not None:
        return name
    k = str(key).strip().lower()
    if not k.startswith(STORAGE_PREFIX):
        return None
    bare = k[len(STORAGE_PREFIX) :]
    for family in ("aws_", "google_", "azure_"):
        bare = bare.removeprefix(family)
    return STORAGE_PREFIX + _STORAGE_ALIASES.get(bare, bare)


_STORAGE_ALIASES = {"endpoint_url": "endpoint", "bucket_name": "bucket"}
"""Storage keys that are another spelling of one setting (obstore's aliases)."""


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a near miss of ``key`` among ``known``, else ``""``.

    The near miss is the closest spelling; failing that, the one name of ``key``'s
    namespace sharing the most words with it
    (``retention.max_retain_after_ingestion_hours``: ``retention.max_age``).
    """
    names = {n.lower(): n for n in known}
    close = difflib.get_close_matches(key.lower(), list(names), n=1, cutoff=0.75)
    if close:
        return f" (did you mean {names[close[0]]!r}?)"
    space, _, rest = key.lower().partition(".")
    shared = {
        name: len(_words(rest) & _words(low.partition(".")[2]))
        for low, name in names.items()
        if rest and low.partition(".")[0] == space
    }
    most = max(shared.values(), default=0)
    best = [name for name, n in shared.items() if n == most]
    return f" (did you mean {best[0]!r}?)" if most and len(best) == 1 else ""


def _words(name: str) -> set[str]:
    """The words of an option name: ``max_open_duration`` -> {max, open, duration}."""
    return set(re.findall(r"[a-z0-9]+", name.lower()))


def store_config_from_options(options: Mapping[str, Any]) -> StoreConfig:
    """Build a validated :class:`StoreConfig` from string options.

    Keys outside the store's namespaces are ignored (Spark passes its own); an
    unknown key inside them (``segment.target_sise``) is an error naming the near miss,
    as is a bad value.
    """
    # Spark hands options over case-insensitively (lower-cased keys): match that way.
    opts: dict[str, Any] = {}
    names: dict[str, str] = {}  # canonical name -> as given, for errors

    def nm(name: str) -> str:
        return names.get(name, name)

    given = {k: v for k, v in options.items() if v is not None}
    for key, value in canonicalize(given, names).items():
        if canonical_option(str(key)) is None:
            if str(key).lower().startswith(_PREFIXES):
                allowed = (
                    "a store option"
                    + did_you_mean(str(key), STORE_OPTIONS)
                    + ": "
                    + ", ".join(sorted(STORE_OPTIONS))
                )
                raise UnknownOptionError(str(key), value, allowed)
            continue
        opts[str(key)] = value

    def setting(name: str) -> Any:
        return OPTION[name].value(opts.get(name), nm(name))

    wal = WalConfig(
        flush_interval_s=setting(o.WAL_FLUSH_INTERVAL),
        max_size_bytes=setting(o.WAL_MAX_SIZE),
        path=setting(o.WAL_PATH),
    )
    segment = SegmentConfig(
        target_size_bytes=setting(o.SEGMENT_TARGET_SIZE),
        max_open_duration_s=setting(o.SEGMENT_MAX_OPEN_DURATION),
        path=setting(o.SEGMENT_PATH),
        event_time_column=setting(o.SEGMENT_EVENT_TIME_COLUMN),
    )
    retention = RetentionConfig(
        size_cap_bytes=setting(o.RETENTION_SIZE_CAP),
        size_cap_policy=setting(o.RETENTION_SIZE_CAP_POLICY),
        max_age_hours=setting(o.RETENTION_MAX_AGE),
        steady_state_headroom_bytes=setting(o.RETENTION_STEADY_STATE_HEADROOM),
        backpressure_timeout_s=setting(o.RETENTION_BACKPRESSURE_TIMEOUT),
    )
    return StoreConfig(
        wal=wal,
        segment=segment,
        retention=retention,
        subscriber_expire_after_s=setting(o.SUBSCRIBER_EXPIRE_AFTER),
        lease_ttl_s=setting(o.LEASE_TTL),
        explicit=frozenset(opts),
    )


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"segment": {"target_size": "32MB"}}`` -> ``{"segment.target_size": "32MB"}``."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def load_yaml_options(path: str) -> dict[str, Any]:
    """Read a store config in the YAML layout of conf/quiver.yaml into flat option strings.

    Accepts the persistence node's ``config:`` block on its own, or a whole pipeline
    file with ``nodes: {<name>: {plugin_urn: ...persistence..., config: {...}}}``.
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError("config", path, f"a readable YAML file ({e.strerror})") from e
    except yaml.YAMLError as e:  # its own text may quote a line of the file: a secret
        raise ConfigError("config", path, f"valid YAML ({_yaml_problem(e)})") from None
    if not isinstance(doc, Mapping):
        raise ConfigError("config", path, "a YAML mapping")
    if "nodes" in doc:
        blocks = [
            n.get("config", {})
            for n in doc["nodes"].values()
            if isinstance(n, Mapping) and "persistence" in str(n.get("plugin_urn", ""))
        ]
        if not blocks:
            raise ConfigError("config", path, "a node whose plugin_urn names persistence")
        doc = blocks[0]
    flat = flatten(doc)
    return {
        k: _yaml_text(v)
        for k, v in flat.items()
        if v is not None or not str(k).lower().startswith(STORAGE_PREFIX)  # null: not set
    }


def _yaml_text(value: object) -> str:
    """A YAML scalar as an option string (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _yaml_problem(e: Exception) -> str:
    """What is wrong with a YAML file and where, without quoting its text."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return type(e).__name__


CONFIG = o.CONFIG
QUIVER_CONFIG = "QUIVER_CONFIG"
"""The environment variable naming the store profile of every query and command of a
process that names none itself (option ``config``, ``--config``)."""
_PROFILE = "a store profile (a YAML file in the layout of conf/quiver.yaml)"


def merged_options(
    options: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    config_name: str = f"option {CONFIG!r}",
) -> dict[str, Any]:
    """Every setting of one query or command from the sources that may give it, in the
    one order of precedence the Spark data source and every ``quiver`` command apply
    (highest first):

    1. ``options``: what the query or command gives explicitly (Spark's options,
       ``storage.<key>`` among them; the CLI's ``-o``, ``-S`` and path flags);
    2. the store profile named by option ``config`` (the CLI's ``--config``) or, when
       none is, by the environment variable :data:`QUIVER_CONFIG` (``environ``, by
       default ``os.environ``): a YAML file in the layout of conf/quiver.yaml whose
       ``storage:`` section holds the object store client's settings
       (:func:`load_profile`);
    3. for a storage key neither sets, the environment the object store client reads
       (``AWS_ENDPOINT``, ``AWS_ACCESS_KEY_ID``...), applied when the root is opened
       (:meth:`~quiver_spark.objects.options.StorageOptions.split`).

    A setting of a layer replaces the same setting below it under any spelling
    (:func:`overlay`). ``config`` is consumed: the result holds none; errors call it
    ``config_name`` (the CLI's ``--config``). Only the process
    that resolves options reads the profile (Spark's driver): what it gave travels
    with the pickled writer or reader state to executors.
    """
    opts = dict(options)
    named = [k for k in opts if str(k).lower() == CONFIG]
    cfg = opts.pop(named[0]) if named else None
    profile = profile_named(cfg, environ)
    if profile is None:
        return opts
    return overlay(load_profile(*profile, config_name=config_name), opts)


def profile_named(
    config: object, environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """``(path, named_by)`` of the store profile in force: option ``config`` when
    given (``named_by`` ``config``), else the environment variable
    :data:`QUIVER_CONFIG` when set and not blank, else None."""
    if config is not None:
        if not str(config).strip():
            raise ConfigError(CONFIG, config, "the path of a YAML store config file")
        return str(config).strip(), CONFIG
    env = os.environ if environ is None else environ
    path = env.get(QUIVER_CONFIG, "").strip()
    return (path, QUIVER_CONFIG) if path else None


def load_profile(
    path: str, named_by: str = CONFIG, *, config_name: str = f"option {CONFIG!r}"
) -> dict[str, str]:
    """The settings of the store profile ``path`` (named by option ``config`` or by
    the environment variable :data:`QUIVER_CONFIG`), as flat option strings: store
    options, ``path``, and its ``storage:`` section (nested or flat) as
    ``storage.<key>``. A file that cannot be used, or a storage key no object store
    client takes, is a :class:`~quiver_spark.errors.ConfigError` naming the file and
    what named it (``config_name`` or the variable; the near miss of a misspelt key),
    never a value the file holds."""
    try:
        settings = load_yaml_options(path)
    except ConfigError as e:
        if named_by == CONFIG:
            raise StoreProfileError(
                CONFIG,
                path,
                e.allowed,
                f"the store profile {path!r} named by {config_name} is not {e.allowed}: "
                f"name {_PROFILE} there",
            ) from None
        raise StoreProfileError(
            QUIVER_CONFIG,
            path,
            f"a path to {_PROFILE}",
            f"the environment variable {QUIVER_CONFIG} names {path!r}, which is not "
            f"{e.allowed}: set {QUIVER_CONFIG} to the path of {_PROFILE}, or unset it",
        ) from None
    where = config_name if named_by == CONFIG else f"the environment variable {named_by}"
    for key in settings:
        k = str(key).lower()
        if k == STORAGE_PREFIX.rstrip("."):
            raise StoreProfileError(
                str(key),
                path,
                "a mapping",
                f"'storage' in the store profile {path!r} (named by {where}) is not a "
                "mapping: write the object store client's settings under it, one per line "
                "(aws_endpoint: https://...)",
            )
        if k.startswith(_PREFIXES) and canonical_option(k) is None:
            raise UnknownProfileOptionError(
                str(key),
                path,
                "a store option",
                f"unknown store option {str(key)!r} in the store profile {path!r} (named "
                f"by {where}){did_you_mean(k, STORE_OPTIONS)}; allowed: "
                + ", ".join(sorted(STORE_OPTIONS)),
            )
        bare = k[len(STORAGE_PREFIX) :] if k.startswith(STORAGE_PREFIX) else None
        if bare is not None and bare not in ANY_ROOT_KEYS:
            raise StoreProfileError(
                str(key),
                path,
                "a storage key",
                f"unknown storage key {bare!r} in the store profile {path!r} (named by "
                f"{where}){near_storage_keys(bare)}; allowed: obstore's configuration keys "
                "(aws_endpoint, aws_region, aws_access_key_id, google_service_account, "
                "azure_storage_account_name, ...), its client keys (allow_http, timeout, "
                "...) or retry_timeout",
            )
    return settings


def validate_partition(value: str) -> str:
    return validate_name("partition", value)
