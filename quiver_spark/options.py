"""Strings to typed config: the one place option values are parsed.

Used by the Spark layer (``spark/options.py``), the YAML config file and the CLI.
Every error names the option, the value given and what is allowed.
Sizes accept ``B/KB/MB/GB/TB`` (1024-based; ``KiB`` spellings too); durations
``ms/s/m/h``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import (
    RetentionConfig,
    SegmentConfig,
    SizeCapPolicy,
    StoreConfig,
    WalConfig,
    validate_name,
)
from .errors import ConfigError, UnknownOptionError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 1024, "kib": 1024, "k": 1024,
    "mb": 1024**2, "mib": 1024**2, "m": 1024**2,
    "gb": 1024**3, "gib": 1024**3, "g": 1024**3,
    "tb": 1024**4, "tib": 1024**4, "t": 1024**4,
}  # fmt: skip
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUM = r"\s*([0-9]+(?:\.[0-9]+)?)\s*"

SIZE_ALLOWED = "a size such as 512KB, 32MB or 4GB (units B, KB, MB, GB, TB; 1024-based)"
DURATION_ALLOWED = "a duration such as 25ms, 5s, 10m, 1h or 7d (units ms, s, m, h, d)"


def parse_size(option: str, value: object) -> int:
    """``'32MB'`` -> 33554432. Plain integers are bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(option, value, SIZE_ALLOWED)
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_duration(option: str, value: object) -> float:
    """``'25ms'`` -> 0.025 seconds. A bare number is seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = re.fullmatch(_NUM + r"(ms|s|m|h|d)?\s*", str(value))
    if not m:
        raise ConfigError(option, value, DURATION_ALLOWED)
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]


def parse_int(option: str, value: object, *, minimum: int = 0) -> int:
    try:
        i = int(str(value).strip())
    except ValueError:
        raise ConfigError(option, value, f"an integer >= {minimum}") from None
    if i < minimum:
        raise ConfigError(option, value, f"an integer >= {minimum}")
    return i


def parse_bool(option: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ConfigError(option, value, "true or false")


def parse_choice(option: str, value: object, choices: list[str]) -> str:
    """One of ``choices``, matched case-insensitively (``DROP_OLDEST`` is ``drop_oldest``)."""
    s = str(value).strip()
    for choice in choices:
        if s.lower() == choice.lower():
            return choice
    raise ConfigError(option, value, " | ".join(choices))


@dataclass(frozen=True)
class Option:
    """One documented option: its name, default as shown, meaning and old spellings.

    Naming scheme: store options are dotted snake_case grouped by what they configure
    (``segment.*``, ``wal.*``, ``retention.*``, ``subscriber.*``); reader options are
    Spark-style camelCase like Kafka's and Delta's (``maxSegmentsPerTrigger``). Aliases
    are earlier spellings, accepted for one release and documented as such.
    """

    name: str
    default: str
    help: str
    aliases: tuple[str, ...] = ()


# The one table of store options: parsing, `quiver` -o flags, errors and the README's
# sink options table (checked by tests/engine/test_options_table.py) all come from it.
STORE_OPTION_TABLE: tuple[Option, ...] = (
    Option("path", "required", "the store's root directory (a local POSIX path reachable by "
           "writers and the driver)"),
    Option("segment.target_size", "32MB", "finalize the open segment at this many bytes"),
    Option("segment.max_open_duration", "5s", "finalize an open segment at this age even when "
           "the stream is idle: the bound on commit-to-visible latency"),
    Option("segment.path", "<path>/segments", "where finalized segments live: a local path or "
           "any fsspec URL (`s3://bucket/prefix`); recorded at creation", ("segments.path",)),
    Option("segment.event_time_column", "none", "a timestamp, date or integer column whose "
           "min/max each segment keeps (batch reads prune on it)", ("eventTimeColumn",)),
    Option("wal.flush_interval", "25ms", "group-fsync period of the WAL; `0` fsyncs every "
           "append"),
    Option("wal.max_size", "4GB", "WAL cap per partition: reaching it finalizes; if undecided "
           "batches still pin it, backpressure"),
    Option("wal.path", "<path>/partitions", "executor-local root for WAL and lock files; "
           "recorded at creation (see Layouts)"),
    Option("retention.size_cap", "none", "store policy: cap on WAL + segments of the whole "
           "store"),
    Option("retention.size_cap_policy", "backpressure", "store policy: `backpressure` (never "
           "delete unacknowledged data; throttle intake) or `drop_oldest` (evict the oldest "
           "unacknowledged segments, recorded as `dropped`)"),
    Option("retention.max_age", "none", "store policy: delete segments ingested longer ago "
           "than this duration (`72h`, `7d`), acknowledged or not (recorded as `dropped`)",
           ("retention.max_retain_after_ingestion_hours",)),
    Option("retention.steady_state_headroom", "0B", "store policy: keep this many bytes of "
           "fully acknowledged segments as a spool"),
    Option("retention.backpressure_timeout", "30s", "how long an append waits for space "
           "before failing with a retryable error (this process's setting, not store policy)"),
    Option("subscriber.expire_after", "none", "store policy: deregister a subscriber that has "
           "not acknowledged for this long, releasing what it pinned"),
    Option("config", "none", "a YAML store config file (explicit options win)"),
)  # fmt: skip

STORE_OPTIONS: dict[str, tuple[str, str]] = {
    o.name: (o.default, o.help) for o in STORE_OPTION_TABLE if o.name not in ("path", "config")
}
"""Store options by canonical name: ``(default as shown, meaning)``."""
ALIASES: dict[str, str] = {a: o.name for o in STORE_OPTION_TABLE for a in o.aliases}
_PREFIXES = ("segment.", "segments.", "wal.", "retention.", "subscriber.")


def canonical_option(key: str) -> str | None:
    """The canonical name of store option ``key`` (any case, or an alias), else None."""
    k = key.strip().lower()
    for name in STORE_OPTIONS:
        if name.lower() == k:
            return name
    for alias, name in ALIASES.items():
        if alias.lower() == k:
            return name
    return None


_HOURS_ALIAS = "retention.max_retain_after_ingestion_hours"


def canonicalize(options: Mapping[str, Any], names: dict[str, str] | None = None) -> dict[str, Any]:
    """Store option keys under their canonical names (other keys unchanged), with an
    alias's own value rule applied: under ``retention.max_retain_after_ingestion_hours``
    a bare number is hours. Used before merging sources of options (YAML, explicit),
    so an explicit option wins over the same option spelled the old way in a file."""
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in options.items():
        name = canonical_option(str(key))
        if name is None:
            out[key] = value
            continue
        if str(key).strip().lower() == _HOURS_ALIAS and re.fullmatch(
            r"\s*[0-9]+(\.[0-9]+)?\s*", str(value)
        ):
            value = f"{str(value).strip()}h"
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
    option in ``base`` under any spelling (an explicit option wins over a file's)."""
    winners = {canonical_option(str(k)) for k in top} - {None}
    out = {k: v for k, v in base.items() if canonical_option(str(k)) not in winners}
    out.update(top)
    return out


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a near miss of ``key`` among ``known``, else ``""``."""
    names = {n.lower(): n for n in known}
    close = difflib.get_close_matches(key.lower(), list(names), n=1, cutoff=0.75)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def store_config_from_options(options: Mapping[str, Any]) -> StoreConfig:
    """Build a validated :class:`StoreConfig` from string options.

    Keys outside the store's namespaces are ignored (Spark passes its own); an
    unknown key inside them (``segment.target_sise``) is an error naming the near miss,
    as is a bad value. Aliases (earlier spellings) are accepted.
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
                known = [*STORE_OPTIONS, *ALIASES]
                allowed = (
                    "a store option"
                    + did_you_mean(str(key), known)
                    + ": "
                    + ", ".join(sorted(STORE_OPTIONS))
                )
                raise UnknownOptionError(str(key), value, allowed)
            continue
        opts[str(key)] = value
    flush_s = parse_duration(nm("wal.flush_interval"), opts.get("wal.flush_interval", "25ms"))
    max_wal = parse_size(nm("wal.max_size"), opts.get("wal.max_size", "4GB"))
    target = parse_size(nm("segment.target_size"), opts.get("segment.target_size", "32MB"))
    max_open_s = parse_duration(
        nm("segment.max_open_duration"), opts.get("segment.max_open_duration", "5s")
    )
    # checked before the dataclasses so the error shows the value as given ("0s", not 0.0)
    for key, val in (("segment.target_size", target),
                     ("segment.max_open_duration", max_open_s),
                     ("wal.max_size", max_wal)):  # fmt: skip
        if val <= 0:
            raise ConfigError(nm(key), opts.get(key), "a value greater than zero")
    wal = WalConfig(
        flush_interval_s=flush_s, max_size_bytes=max_wal, path=_opt_str(opts, "wal.path")
    )
    segment = SegmentConfig(
        target_size_bytes=target,
        max_open_duration_s=max_open_s,
        path=_opt_str(opts, "segment.path"),
        event_time_column=_opt_str(opts, "segment.event_time_column"),
    )
    policy = parse_choice(
        nm("retention.size_cap_policy"),
        opts.get("retention.size_cap_policy", "backpressure"),
        [p.value for p in SizeCapPolicy],
    )
    cap = opts.get("retention.size_cap")
    retention = RetentionConfig(
        size_cap_bytes=parse_size(nm("retention.size_cap"), cap) if _given(cap) else None,
        size_cap_policy=SizeCapPolicy(policy),
        max_retain_after_ingestion_hours=_max_age_hours(
            opts.get("retention.max_age"), nm("retention.max_age")
        ),
        steady_state_headroom_bytes=parse_size(
            nm("retention.steady_state_headroom"), opts.get("retention.steady_state_headroom", 0)
        ),
        backpressure_timeout_s=parse_duration(
            nm("retention.backpressure_timeout"), opts.get("retention.backpressure_timeout", "30s")
        ),
    )
    if retention.size_cap_bytes is not None and retention.size_cap_bytes <= 0:
        raise ConfigError(nm("retention.size_cap"), cap, "a size greater than zero")
    expire = opts.get("subscriber.expire_after")
    expire_s = None
    if _given(expire):
        expire_s = parse_duration(nm("subscriber.expire_after"), expire)
        if expire_s <= 0:
            raise ConfigError(nm("subscriber.expire_after"), expire, "a duration greater than zero")
    return StoreConfig(
        wal=wal,
        segment=segment,
        retention=retention,
        subscriber_expire_after_s=expire_s,
        explicit=frozenset(opts),
    )


def _given(value: object) -> bool:
    return value is not None and str(value).strip().lower() not in ("", "none")


def _max_age_hours(value: object, name: str = "retention.max_age") -> float | None:
    """``retention.max_age`` in hours: a duration with a unit (``72h``, ``7d``); a bare
    number is refused, being ambiguous between the old hours and seconds."""
    if not _given(value):
        return None
    text = str(value).strip()
    allowed = "a positive duration with a unit, such as 72h or 7d"
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        raise ConfigError(name, value, allowed + " (a bare number is ambiguous)")
    hours = parse_duration(name, text) / 3600
    if not hours > 0 or hours == float("inf"):
        raise ConfigError(name, value, allowed)
    return hours


def _opt_str(opts: Mapping[str, Any], key: str) -> str | None:
    v = opts.get(key)
    if v is None or str(v).strip() == "":
        return None
    return str(v).strip()


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
