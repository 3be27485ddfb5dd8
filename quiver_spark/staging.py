"""Staged transactions: a write task's rows in the root before its commit message
(ARCHITECTURE.md §12.6).

On an object root a task's rows are durable on its machine's disk (the WAL) when it
flushes; a lost machine would take them along, committed or not. So before the task
reports its transaction, its rows are also written to the root as one object,
``partitions/<pid>/txns/<txn_id:020d>.txn``, created only if absent: a §6 frame (magic
``QSTG``, checksummed) whose msgpack body names the transaction and holds its batches
as one Arrow IPC stream. The partition's writer seals its transactions from its WAL as
usual and then removes their staged objects; if the machine is lost, whoever takes the
partition's lease next seals the committed ones from these objects (§12.6).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from .config import validate_name
from .errors import CorruptionError
from .format import FRAME_SIZE, decode_frame, encode_frame
from .objects import ObjectStore, create_or_same

MAGIC_STAGED = b"QSTG"
STAGED_DIR = "txns"
STAGED_SUFFIX = ".txn"


def staged_prefix(partition: str) -> str:
    """``partitions/<pid>/txns/``: where ``partition``'s staged transactions live."""
    return f"partitions/{validate_name('partition', partition)}/{STAGED_DIR}/"


def staged_key(partition: str, txn_id: int) -> str:
    """The key of transaction ``txn_id`` of ``partition``."""
    return f"{staged_prefix(partition)}{txn_id:020d}{STAGED_SUFFIX}"


@dataclass(frozen=True)
class StagedTxn:
    """A staged transaction as read back: who wrote it and its rows."""

    partition: str
    txn_id: int
    app: str
    version: int
    rows: int
    table: pa.Table
    created_ns: int = 0
    """When it was staged (wall clock of the task): the segment's ingestion time."""

    def batches(self) -> list[pa.RecordBatch]:
        return self.table.to_batches()


def encode_staged(
    partition: str, txn_id: int, app: str, version: int, batches: Sequence[pa.RecordBatch]
) -> bytes:
    """The bytes of a staged transaction (at least one batch, all of one schema)."""
    if not batches:
        raise ValueError("a staged transaction holds at least one batch")
    schema = batches[0].schema
    if any(not b.schema.equals(schema, check_metadata=True) for b in batches[1:]):
        # the store takes batches that differ in nullability or metadata as one schema
        # (§5); one IPC stream has one: nullable where any batch is, the first's metadata
        try:
            schema = pa.unify_schemas([b.schema for b in batches])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(
                f"a staged transaction's batches must have one schema (nullability and "
                f"metadata aside): {e}"
            ) from e
        batches = [
            b
            if b.schema.equals(schema, check_metadata=True)
            else pa.RecordBatch.from_arrays(b.columns, schema=schema)
            for b in batches
        ]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for b in batches:
            w.write_batch(b)
    body = {
        "partition": partition,
        "txn": int(txn_id),
        "app": app,
        "version": int(version),
        "rows": sum(b.num_rows for b in batches),
        "created_ns": time.time_ns(),
        "ipc": sink.getvalue().to_pybytes(),
    }
    return encode_frame(MAGIC_STAGED, body)


def decode_staged(where: str, raw: bytes) -> StagedTxn:
    """Verify and decode; CorruptionError naming ``where`` when the bytes are damaged."""
    body = decode_frame(where, MAGIC_STAGED, raw)
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body["ipc"])).read_all()
        staged = StagedTxn(
            str(body["partition"]),
            int(body["txn"]),
            str(body["app"]),
            int(body["version"]),
            int(body["rows"]),
            table,
            int(body.get("created_ns", 0)),
        )
    except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as e:
        raise CorruptionError(where, FRAME_SIZE, f"undecodable staged transaction: {e}") from e
    if staged.rows != table.num_rows:
        raise CorruptionError(
            where, FRAME_SIZE, f"names {staged.rows} rows but holds {table.num_rows}"
        )
    return staged


def stage(
    objects: ObjectStore,
    partition: str,
    txn_id: int,
    app: str,
    version: int,
    batches: Sequence[pa.RecordBatch],
) -> int:
    """Write the staged object of a transaction (create if absent; a retry after a lost
    response recognises its own bytes). Returns the bytes written. Raises
    FileExistsError when another transaction's bytes hold the key."""
    data = encode_staged(partition, txn_id, app, version, batches)
    key = staged_key(partition, txn_id)
    if not create_or_same(objects, key, data):
        got = objects.get(key)
        if got is not None:
            try:
                old = decode_staged(objects.display(key), got.data)
            except CorruptionError:
                old = None
            if old is not None and (old.app, old.version, old.rows) == (
                app,
                version,
                sum(b.num_rows for b in batches),
            ):
                return len(data)  # the same transaction, staged by an earlier attempt
        raise FileExistsError(f"{objects.display(key)}: holds another transaction")
    return len(data)


def staged_ids(objects: ObjectStore, partition: str) -> list[int]:
    """The transaction ids staged for ``partition`` (one listing), ascending."""
    prefix = staged_prefix(partition)
    out = []
    for info in objects.list(prefix):
        name = info.key[len(prefix) :]
        stem = name[: -len(STAGED_SUFFIX)] if name.endswith(STAGED_SUFFIX) else ""
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def read_staged(objects: ObjectStore, partition: str, txn_id: int) -> StagedTxn | None:
    """The staged transaction, None when it is not (or no longer) there."""
    key = staged_key(partition, txn_id)
    got = objects.get(key)
    return None if got is None else decode_staged(objects.display(key), got.data)


def drop_staged(objects: ObjectStore, partition: str, txn_ids: Iterable[int]) -> None:
    """Remove staged transactions (sealed or decided against); missing ones are fine."""
    for t in txn_ids:
        objects.delete(staged_key(partition, t))
