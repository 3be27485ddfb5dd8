"""Values as people write them, to typed values: sizes, durations, integers, flags,
choices. Every error names the option, the value given and what is allowed.

Sizes accept ``B/KB/MB/GB/TB`` (1024-based; ``KiB`` spellings too); durations
``ms/s/m/h/d``. Used by the option table (:mod:`quiver_spark.option_table`), the
store's and the reader's option parsing and the CLI.
"""

from __future__ import annotations

import re

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


def given(value: object) -> bool:
    """False for an absent option: ``None``, an empty string or ``none``."""
    return value is not None and str(value).strip().lower() not in ("", "none")
