"""Spark option strings -> the engine's typed config (sink and source share this).

Spark hands a data source its options as strings in a case-insensitive map (keys
arrive lower-cased). This module folds in the store profile (the YAML file named by
option ``config``, else by the environment variable ``QUIVER_CONFIG``; explicit options
win: :func:`~quiver_spark.options.merged_options`), resolves the store root and builds
the validated
:class:`~quiver_spark.config.StoreConfig`. Parsing of values lives in
:mod:`quiver_spark.options`; every error names the option, the value and what is
allowed (:class:`~quiver_spark.errors.ConfigError`).

>>> store_root({"path": "/data/quiver"})
'/data/quiver'
>>> store_config({"path": "/q", "segment.target_size": "8MB"}).segment.target_size_bytes
8388608
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, UnknownOptionError
from ..options import (
    STORE_OPTIONS,
    StoreConfig,
    canonical_option,
    check_url,
    did_you_mean,
    merged_options,
    root_location,
    store_config_from_options,
)

PATH = "path"
CONFIG = "config"
STORAGE_PREFIX = "storage."
"""Options ``storage.<key>`` are the object store's client settings (endpoint,
credentials, region: obstore's configuration keys), as Delta's writers take
``storage_options``; they never appear in errors, logs or plans."""

PATH_ALLOWED = (
    "a store directory: .start('/data/quiver') / .save(...) / .load(...), "
    "option 'path', or 'path' in the YAML file of option 'config'"
)


class SparkOptions(dict[str, str]):
    """A query's options folded once (:func:`spark_options`): handed to any function
    of this module again they are taken as they are, so a handle reads the store
    profile once and parses its root once (:attr:`root`)."""

    root: str | None = None
    """The store root, once :func:`store_root` parsed it."""

    def __repr__(self) -> str:  # names only: the storage.* values may be secrets
        return f"SparkOptions({sorted(self)})"


def spark_options(options: Mapping[str, Any]) -> SparkOptions:
    """Options with lower-cased keys and the store profile folded in (explicit wins;
    :func:`~quiver_spark.options.merged_options` states the precedence).

    Runs where Spark resolves options (the driver's planning workers, its stream source
    and sink runners), which read ``QUIVER_CONFIG`` and the file; executors get the
    result in the pickled writer or reader state and read neither. Keys are lower-cased
    on both sides so a YAML ``maxSegmentsPerTrigger`` and an explicit
    ``maxsegmentspertrigger`` (Spark's spelling after its case-insensitive map) are one
    key.
    """
    if isinstance(options, SparkOptions):
        return options
    explicit = {str(k).lower(): v for k, v in options.items() if v is not None}
    merged = merged_options(explicit)  # the profile's first, then the explicit ones
    return SparkOptions({str(k).lower(): str(v) for k, v in merged.items()})


def store_root(options: Mapping[str, Any]) -> str:
    """The store's root directory as an absolute local path; raises when it is missing.

    The root holds the descriptor, WAL (unless ``wal.path``) and commit records, so it
    must be a POSIX path every writer and the driver can reach; finalized segments
    may go elsewhere (``segment.path``: an object-store URL or any fsspec URL).
    """
    opts = spark_options(options)
    if opts.root is None:
        raw = opts.get(PATH)
        if raw is None or not str(raw).strip():
            raise ConfigError(PATH, raw, PATH_ALLOWED)
        opts.root = root_location(PATH, raw)
    return opts.root


def storage_options(options: Mapping[str, Any]) -> dict[str, str]:
    """The ``storage.<key>`` options as ``{key: value}`` (keys as Spark lower-cased them)."""
    return {
        k[len(STORAGE_PREFIX) :]: str(v)
        for k, v in spark_options(options).items()
        if k.startswith(STORAGE_PREFIX) and len(k) > len(STORAGE_PREFIX)
    }


def source_root(options: Mapping[str, Any]) -> str:
    """The root a reader names (``load(path)`` / option ``path``), as :func:`store_root`."""
    return store_root(options)


def store_config(options: Mapping[str, Any]) -> StoreConfig:
    """Parse every store option (``segment.*``, ``wal.*``, ``retention.*``,
    ``subscriber.*``, ``lease.*``) into a validated :class:`StoreConfig`.

    Unknown keys inside the store's namespaces are errors (a typo must not be
    ignored); keys outside them belong to Spark or to the source and are skipped.
    ``segment.path`` must be a local path, an object-store URL or a URL whose fsspec
    backend is installed.
    """
    config = store_config_from_options(spark_options(options))
    if config.segment.path:  # a missing backend fails here, at query start
        check_url("segment.path", config.segment.path)
    return config


SINK_SPARK_OPTIONS = ("checkpointlocation", "queryname")
"""Keys Spark itself may hand a sink with the user's options."""


def check_sink_known(options: Mapping[str, Any]) -> None:
    """Refuse an option the sink does not know, naming it and the near miss."""
    for key, value in spark_options(options).items():
        k = str(key).lower()
        if k in (PATH, CONFIG, *SINK_SPARK_OPTIONS) or canonical_option(k) is not None:
            continue
        if k.startswith(STORAGE_PREFIX) and len(k) > len(STORAGE_PREFIX):
            continue
        hint = did_you_mean(k, STORE_OPTIONS)
        raise UnknownOptionError(
            str(key),
            value,
            f"a Quiver sink option{hint}: path, config, or a store option "
            "(segment.*, wal.*, retention.*, subscriber.*, storage.*; see README Options)",
        )


def validate_sink_options(options: Mapping[str, Any]) -> tuple[str, StoreConfig]:
    """Everything the sink needs, validated at once (query start): root and config;
    an unknown option is refused like the source's."""
    check_sink_known(options)
    root = store_root(options)
    config = store_config(options)
    return root, config
