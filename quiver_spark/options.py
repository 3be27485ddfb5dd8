"""Strings to typed config: the one place option values are parsed.

Used by the Spark layer (``spark/options.py``), the YAML config file and the CLI.
Every error names the option, the value given and what is allowed.
Sizes accept ``B/KB/MB/GB/TB`` (1024-based; ``KiB`` spellings too); durations
``ms/s/m/h``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .config import (
    RetentionConfig,
    SegmentConfig,
    SizeCapPolicy,
    StoreConfig,
    WalConfig,
    validate_name,
)
from .errors import ConfigError

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


def parse_positive_float(option: str, value: object, allowed: str) -> float:
    try:
        f = float(str(value).strip())
    except ValueError:
        raise ConfigError(option, value, allowed) from None
    if not f > 0 or f == float("inf"):
        raise ConfigError(option, value, allowed)
    return f


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


# Store options: name -> (default shown in docs, description). The README table is
# generated from the same facts; keep names stable (they are part of the contract).
STORE_OPTIONS: dict[str, tuple[str, str]] = {
    "segment.target_size": ("32MB", "finalize the open segment at this many bytes"),
    "segment.max_open_duration": ("5s", "finalize an open segment at this age, even if idle"),
    "segments.path": ("<path>/segments", "where finalized segments live (local or fsspec URL)"),
    "wal.flush_interval": ("25ms", "group fsync period of the WAL; 0 = fsync every append"),
    "wal.max_size": ("4GB", "WAL cap per partition; reaching it finalizes, then backpressure"),
    "wal.path": ("<path>/partitions", "executor-local root for WAL and locks"),
    "retention.size_cap": ("none", "cap on WAL + segments of the whole store"),
    "retention.size_cap_policy": ("backpressure", "backpressure | drop_oldest"),
    "retention.max_retain_after_ingestion_hours": ("none", "delete older segments regardless"),
    "retention.steady_state_headroom": ("0B", "bytes of acked segments to keep as a spool"),
    "retention.backpressure_timeout": ("30s", "how long an append waits for space"),
    "subscriber.expire_after": (
        "none",
        "store policy: deregister a subscriber that has not acknowledged for this long",
    ),
    "eventTimeColumn": ("none", "column whose min/max each segment's metadata keeps"),
}
_PREFIXES = ("segment.", "segments.", "wal.", "retention.", "subscriber.")


def store_config_from_options(options: Mapping[str, Any]) -> StoreConfig:
    """Build a validated :class:`StoreConfig` from string options.

    Keys outside the store's namespaces are ignored (Spark passes its own); an
    unknown key inside them (``segment.target_sise``) is an error, as is a bad value.
    """
    # Spark hands options over case-insensitively (lower-cased keys): match that way.
    canonical = {k.lower(): k for k in STORE_OPTIONS}
    opts: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        name = canonical.get(key.lower())
        if name is None:
            if key.lower().startswith(_PREFIXES):
                allowed = "a known option: " + ", ".join(sorted(STORE_OPTIONS))
                raise ConfigError(key, value, allowed)
            continue
        opts[name] = value
    flush_s = parse_duration("wal.flush_interval", opts.get("wal.flush_interval", "25ms"))
    max_wal = parse_size("wal.max_size", opts.get("wal.max_size", "4GB"))
    target = parse_size("segment.target_size", opts.get("segment.target_size", "32MB"))
    max_open_s = parse_duration(
        "segment.max_open_duration", opts.get("segment.max_open_duration", "5s")
    )
    # checked before the dataclasses so the error shows the value as given ("0s", not 0.0)
    for key, val in (("segment.target_size", target),
                     ("segment.max_open_duration", max_open_s),
                     ("wal.max_size", max_wal)):  # fmt: skip
        if val <= 0:
            raise ConfigError(key, opts.get(key), "a value greater than zero")
    wal = WalConfig(
        flush_interval_s=flush_s, max_size_bytes=max_wal, path=_opt_str(opts, "wal.path")
    )
    segment = SegmentConfig(
        target_size_bytes=target,
        max_open_duration_s=max_open_s,
        path=_opt_str(opts, "segments.path"),
        event_time_column=_opt_str(opts, "eventTimeColumn"),
    )
    policy = parse_choice(
        "retention.size_cap_policy",
        opts.get("retention.size_cap_policy", "backpressure"),
        [p.value for p in SizeCapPolicy],
    )
    cap = opts.get("retention.size_cap")
    hours = opts.get("retention.max_retain_after_ingestion_hours")
    retention = RetentionConfig(
        size_cap_bytes=parse_size("retention.size_cap", cap) if cap not in (None, "") else None,
        size_cap_policy=SizeCapPolicy(policy),
        max_retain_after_ingestion_hours=(
            parse_positive_float(
                "retention.max_retain_after_ingestion_hours", hours, "a positive number of hours"
            )
            if hours not in (None, "")
            else None
        ),
        steady_state_headroom_bytes=parse_size(
            "retention.steady_state_headroom", opts.get("retention.steady_state_headroom", 0)
        ),
        backpressure_timeout_s=parse_duration(
            "retention.backpressure_timeout", opts.get("retention.backpressure_timeout", "30s")
        ),
    )
    if retention.size_cap_bytes is not None and retention.size_cap_bytes <= 0:
        raise ConfigError("retention.size_cap", cap, "a size greater than zero")
    expire = opts.get("subscriber.expire_after")
    expire_s = None
    if expire not in (None, "", "none"):
        expire_s = parse_duration("subscriber.expire_after", expire)
        if expire_s <= 0:
            raise ConfigError("subscriber.expire_after", expire, "a duration greater than zero")
    return StoreConfig(
        wal=wal,
        segment=segment,
        retention=retention,
        subscriber_expire_after_s=expire_s,
        explicit=frozenset(opts),
    )


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
    """Read a store config in the proposal's YAML layout into flat option strings.

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
    if "segment.path" in flat:  # the proposal's layout nests segments' location
        flat["segments.path"] = flat.pop("segment.path")
    return {k: (str(v) if not isinstance(v, str) else v) for k, v in flat.items()}


def merged_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options with a YAML ``config`` file folded in; explicit options win."""
    opts = dict(options)
    cfg = opts.pop("config", None)
    if cfg:
        base = load_yaml_options(str(cfg))
        base.update(opts)
        return base
    return opts


def validate_partition(value: str) -> str:
    return validate_name("partition", value)
