"""What a store recorded about itself, and the config a handle runs with.

The store descriptor ``<root>/STORE`` (ARCHITECTURE.md §6) is written once, when the
store is created, with its segment location and WAL root; the first write records
the schema in it. :func:`effective_config` is a handle's config reconciled with what
the store recorded: its locations (STORE) and its policy (POLICY, §6.6); an explicit
option that contradicts either is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from typing import Any

import pyarrow as pa

from . import format as fmt
from .config import StoreConfig
from .errors import ConfigError, StoreNotFoundError
from .fs import FileIO, file_lock
from .policy import STORE_LOCK, ensure_policy, policy_of, read_policy, reconcile
from .segment.urls import check_url

log = logging.getLogger(__name__)

STORE_FORMAT = 1
"""The ``format`` a new STORE descriptor records."""


def location_key(url: str) -> str:
    """A segments location in a form two spellings of the same place share."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" in url:
        return url.rstrip("/")
    return os.path.normpath(os.path.abspath(url))


def schemas_compatible(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names and types in the same order; nullability and metadata ignored."""
    return a.names == b.names and all(x.type.equals(y.type) for x, y in zip(a, b, strict=True))


def load_or_create_descriptor(
    root: str, config: StoreConfig, io: FileIO, create: bool
) -> dict[str, Any]:
    path = os.path.join(root, fmt.STORE_FILE)
    try:
        return fmt.decode_frame(path, fmt.MAGIC_STORE, io.read_file(path))
    except FileNotFoundError:
        if not create:
            raise StoreNotFoundError(
                f"{root} is not a Quiver store (no {fmt.STORE_FILE} file); "
                "create one by writing to it"
            ) from None
    if config.segment.path:  # a bad URL or missing backend must not leave a half-made store
        check_url("segment.path", config.segment.path)
    io.mkdir(root)
    with file_lock(os.path.join(root, STORE_LOCK)):
        try:  # another process may have created it meanwhile
            return fmt.decode_frame(path, fmt.MAGIC_STORE, io.read_file(path))
        except FileNotFoundError:
            pass
        body = {
            "format": STORE_FORMAT,
            "uuid": uuid.uuid4().hex,
            "created_ns": time.time_ns(),
            "schema": None,
            "segments_url": config.segment.path,
            "wal_path": (os.path.abspath(config.wal.path) if config.wal.path else None),
        }
        io.atomic_write(path, fmt.encode_frame(fmt.MAGIC_STORE, body))
        log.info("quiver.store.create root=%s", root)
        return body


def read_descriptor(root: str, io: FileIO) -> dict[str, Any]:
    """The STORE descriptor as it is on disk now."""
    path = os.path.join(root, fmt.STORE_FILE)
    return fmt.decode_frame(path, fmt.MAGIC_STORE, io.read_file(path))


def record_schema(root: str, io: FileIO, schema: pa.Schema) -> dict[str, Any]:
    """Record ``schema`` in STORE unless a schema is recorded already; the descriptor
    as it is then."""
    with file_lock(os.path.join(root, STORE_LOCK)):
        body = read_descriptor(root, io)
        if body.get("schema") is None:
            body = dict(body)
            body["schema"] = schema.remove_metadata().serialize().to_pybytes()
            io.atomic_write(
                os.path.join(root, fmt.STORE_FILE), fmt.encode_frame(fmt.MAGIC_STORE, body)
            )
        return body


def effective_config(
    root: str, config: StoreConfig, io: FileIO, descriptor: dict[str, Any], create: bool
) -> StoreConfig:
    """``config`` with the store's recorded policy and WAL root; an explicit option
    that contradicts either is refused (ARCHITECTURE.md §6.6)."""
    policy = ensure_policy(root, io, config) if create else read_policy(root, io)
    if policy is not None:
        reconcile(root, policy, config)
    else:  # a store from before policies were recorded, opened read-only
        policy = policy_of(config)
    wal_path = config.wal.path
    if "wal_path" in descriptor:  # recorded at creation (None: under the root)
        recorded = descriptor["wal_path"]
        shown = recorded or os.path.join(root, fmt.PARTITIONS_DIR)
        if wal_path and location_key(wal_path) != location_key(shown):
            raise ConfigError(
                "wal.path",
                wal_path,
                f"the WAL root store {root} recorded in its {fmt.STORE_FILE} at creation, "
                f"{shown!r} (omit wal.path to use it)",
            )
        wal_path = recorded
    return dataclasses.replace(
        config,
        wal=dataclasses.replace(config.wal, path=wal_path),
        retention=policy.retention(config.retention),
        subscriber_expire_after_s=policy.expire_after_s,
    )
