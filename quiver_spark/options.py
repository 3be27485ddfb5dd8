"""Store options as given (Spark options, a YAML file, the CLI) to a typed StoreConfig.

Options are matched under any case (:func:`canonicalize`), sources are layered
(:func:`overlay`, :func:`merged_options`), and each value is parsed by its entry in the
option table (:mod:`quiver_spark.option_table`, which holds every option's name,
default, parser and meaning). Every error names the option as given, the value given and
what is allowed. A front end (the Spark data source, the CLI) parses its options with
what this module exports, a root (option ``path``) with :func:`root_location` and a
location it must reach with :func:`check_url`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import option_table as o
from .config import RetentionConfig, SegmentConfig, StoreConfig, WalConfig, validate_name
from .errors import ConfigError, UnknownOptionError
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
    "load_yaml_options",
    "merged_options",
    "overlay",
    "parse_bool",
    "parse_choice",
    "parse_duration",
    "parse_int",
    "parse_size",
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
    """``base`` with ``top`` over it, where a store option in ``top`` replaces the same
    option in ``base`` in any case (an explicit option wins over a file's)."""
    winners = {canonical_option(str(k)) for k in top} - {None}
    out = {k: v for k, v in base.items() if canonical_option(str(k)) not in winners}
    out.update(top)
    return out


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
    except yaml.YAMLError as e:
        raise ConfigError("config", path, f"valid YAML ({e})") from e
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
    return {k: (str(v) if not isinstance(v, str) else v) for k, v in flat.items()}


def merged_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options with a YAML ``config`` file folded in; explicit options win."""
    opts = dict(options)
    cfg = opts.pop("config", None)
    if cfg:
        return overlay(load_yaml_options(str(cfg)), opts)
    return opts


def validate_partition(value: str) -> str:
    return validate_name("partition", value)
