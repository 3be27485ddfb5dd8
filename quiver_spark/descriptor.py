"""What a store recorded about itself, and the config a handle runs with.

The store descriptor ``<root>/STORE`` (ARCHITECTURE.md §6) is written once, when the
store is created, with its segment location and WAL root; the first write records
the schema in it. :func:`effective_config` is a handle's config reconciled with what
the store recorded: its locations (STORE) and its policy (POLICY, §7.2); an explicit
option that contradicts either is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any

import pyarrow as pa

from . import format as fmt
from . import layout
from .config import StoreConfig
from .control import cas
from .errors import (
    MAKING_A_STORE,
    ConfigError,
    ObjectExists,
    QuiverError,
    SchemaMismatchError,
    StoreNotFoundError,
)
from .objects import ObjectStore
from .objects.writes import retry_conflicts
from .policy import ensure_policy, policy_before_store, policy_of, read_policy, reconcile
from .root_kind import root_kind
from .urls import check_url, location_key

log = logging.getLogger(__name__)

STORE_FORMAT = 1
"""The ``format`` a new STORE descriptor records."""
STORE_KEY = layout.store_descriptor()


def schemas_compatible(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names and types in the same order; nullability and metadata ignored."""
    return a.names == b.names and all(x.type.equals(y.type) for x, y in zip(a, b, strict=True))


def _decode(objects: ObjectStore, raw: bytes) -> dict[str, Any]:
    return fmt.decode_frame(objects.display(STORE_KEY), fmt.MAGIC_STORE, raw)


def load_or_create_descriptor(
    objects: ObjectStore, config: StoreConfig, create: bool
) -> dict[str, Any]:
    """The STORE descriptor, created (``create``) if the root has none.

    Created if absent: of two first openers racing, exactly one writes it and the
    other reads that one, so both run on one store (one ``uuid``, one set of
    locations). STORE is the creation's last write, its commit point (ARCHITECTURE.md
    §7.1): POLICY and POLICY.copy come first, so a creation stopped at any point
    leaves no store (a later creation adopts the POLICY it left) or a whole one.
    """
    got = objects.get(STORE_KEY)
    if got is not None:
        return _decode(objects, got.data)
    if not create:
        raise StoreNotFoundError(
            f"{objects.url} is not a Quiver store (no {STORE_KEY} file): {MAKING_A_STORE}"
        )
    kind = root_kind(objects.url)
    kind.check_segment_path(config, f"{objects.url}/{layout.segments_dir()}")
    if config.segment.path:  # a bad URL or missing backend must not leave a half-made store
        check_url("segment.path", config.segment.path)
    policy_before_store(objects, config)
    body = {
        "format": STORE_FORMAT,
        "uuid": uuid.uuid4().hex,
        "created_ns": time.time_ns(),
        "schema": None,
        "segments_url": config.segment.path,
        "wal_path": kind.recorded_wal_path(config),
    }
    data = fmt.encode_frame(fmt.MAGIC_STORE, body)
    try:
        retry_conflicts(lambda: objects.create(STORE_KEY, data))
    except ObjectExists:  # another opener created it meanwhile: its descriptor is the store's
        return read_descriptor(objects)
    log.info("quiver.store.create root=%s", objects.url)
    return body


def read_descriptor(objects: ObjectStore) -> dict[str, Any]:
    """The STORE descriptor as it is stored now."""
    got = objects.get(STORE_KEY)
    if got is None:
        raise StoreNotFoundError(f"{objects.display(STORE_KEY)} is missing: not a Quiver store")
    return _decode(objects, got.data)


def record_schema(objects: ObjectStore, schema: pa.Schema) -> dict[str, Any]:
    """Record ``schema`` in STORE unless a schema is recorded already; the descriptor
    as it is then.

    A replace conditional on the version read: of two first writers racing, one
    records its schema and the other reads it back (the caller then compares it with
    its own). An error whose outcome is unknown is raised; the next call reads again.
    """
    found: dict[str, Any] = {}

    def read() -> cas.Current[dict[str, Any]]:
        got = objects.get(STORE_KEY)
        if got is None:
            raise StoreNotFoundError(f"{objects.display(STORE_KEY)} is missing: not a Quiver store")
        return cas.Current(_decode(objects, got.data), got.version)

    def change(body: dict[str, Any] | None) -> dict[str, Any] | None:
        assert body is not None
        if body.get("schema") is not None:
            found.update(body)
            return None
        body = dict(body)
        body["schema"] = schema.remove_metadata().serialize().to_pybytes()
        return body

    written = cas.update(
        objects,
        STORE_KEY,
        change,
        read=read,
        encode=lambda body: fmt.encode_frame(fmt.MAGIC_STORE, body),
        give_up=lambda attempts: QuiverError(
            f"{objects.display(STORE_KEY)}: the schema could not be recorded in "
            f"{attempts} attempts, STORE kept changing under the write; retry"
        ),
    )
    return found if written is None else written.value


def store_id(body: dict[str, Any]) -> str | None:
    """The store's identity: the random ``uuid`` its STORE descriptor records at creation
    (ARCHITECTURE.md §7.1), never rewritten; source offsets and commit records name it.
    None only for a damaged STORE that records none."""
    found = body.get("uuid")
    return found if isinstance(found, str) and found else None


def recorded_schema(body: dict[str, Any]) -> pa.Schema | None:
    """The schema a STORE body records (None before the first write)."""
    raw = body.get("schema")
    return pa.ipc.read_schema(pa.py_buffer(raw)) if raw is not None else None


def ensure_schema(objects: ObjectStore, schema: pa.Schema) -> dict[str, Any]:
    """Record ``schema`` unless one is recorded (:func:`record_schema`); the descriptor.
    SchemaMismatchError when the recorded one (another writer's, maybe recorded in a
    race with this one) has other column names or types."""
    body = record_schema(objects, schema)
    current = recorded_schema(body)
    assert current is not None
    if not schemas_compatible(current, schema):
        raise SchemaMismatchError(current, schema, "column names or types differ")
    return body


def effective_config(
    root: str,
    objects: ObjectStore,
    config: StoreConfig,
    descriptor: dict[str, Any],
    create: bool,
) -> StoreConfig:
    """``config`` with the store's recorded policy and WAL root; an explicit option
    that contradicts either is refused (ARCHITECTURE.md §7.2)."""
    policy = ensure_policy(objects, config) if create else read_policy(objects)
    if policy is not None:
        reconcile(objects.url, policy, config)
    else:  # a store from before policies were recorded, opened read-only
        policy = policy_of(config)
    wal_path = config.wal.path
    found = root_kind(root).recorded_wal(root, descriptor)
    if found is not None:  # recorded at creation; an object root records none: each
        # machine keeps its WAL on its own disk (ARCHITECTURE.md §2)
        shown, recorded = found
        if wal_path and location_key(wal_path) != location_key(shown):
            raise ConfigError(
                "wal.path",
                wal_path,
                f"the WAL root store {root} recorded in its {STORE_KEY} at creation, "
                f"{shown!r} (omit wal.path to use it)",
            )
        wal_path = recorded
    return dataclasses.replace(
        config,
        wal=dataclasses.replace(config.wal, path=wal_path),
        retention=policy.retention(config.retention),
        subscriber_expire_after_s=policy.expire_after_s,
    )
