"""Staged transactions: a write task's rows in the root before its commit message
(ARCHITECTURE.md §10.2).

On an object root a task's rows are durable on its machine's disk (the WAL) when it
flushes; a lost machine would take them along, committed or not. So before the task
reports its transaction, its rows are also written to the root as one object,
``partitions/<pid>/txns/<txn_id:020d>.txn``, created only if absent: a §6 frame (magic
``QSTG``, checksummed) whose msgpack body names the transaction and holds its batches
as one Arrow IPC stream. The partition's writer seals its transactions from its WAL as
usual and then removes their staged objects; if the machine is lost, whoever takes the
partition's lease next seals the committed ones from these objects (§10.2).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from . import layout
from .config import validate_name
from .errors import CorruptionError, InvalidArgumentError, ObjectTaken, TransactionSchemaError
from .format import FRAME_SIZE, MAGIC_STAGED, decode_frame, encode_frame
from .objects import ObjectStore, create_or_same


def staged_prefix(partition: str) -> str:
    """``partitions/<pid>/txns/``: where ``partition``'s staged transactions live."""
    return layout.staged_prefix(validate_name("partition", partition))


def staged_key(partition: str, txn_id: int) -> str:
    """The key of transaction ``txn_id`` of ``partition``."""
    return layout.staged_txn(validate_name("partition", partition), txn_id)


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


def one_schema(
    partition: str, txn_id: int, batches: Sequence[pa.RecordBatch]
) -> list[pa.RecordBatch]:
    """The batches under one schema: the store takes batches whose columns have the same
    names and types in the same order, nullability and metadata aside (§5), as one; an
    IPC stream has one schema: theirs, nullable where any batch is, with the first
    batch's metadata. A batch with the same (unique) column names in another order is
    taken column by column by name; a column's values never move under another
    column's name. Anything else is refused in one line naming the columns."""
    first = batches[0].schema
    if all(b.schema.equals(first, check_metadata=True) for b in batches[1:]):
        return list(batches)
    what = f"staged transaction {txn_id} of partition {partition}"
    unique = len(set(first.names)) == len(first.names)
    picks: list[list[int]] = []  # per batch: its column index for each of first's
    for n, b in enumerate(batches):
        names = b.schema.names
        if names == first.names:
            pick = list(range(len(names)))
        elif unique and len(names) == len(first.names) and set(names) == set(first.names):
            pick = [names.index(name) for name in first.names]
        else:
            differ = sorted(set(names) ^ set(first.names)) or names
            raise TransactionSchemaError(
                f"{what}: batch {n} has columns {names}, batch 0 has {first.names} "
                f"(differing: {differ}); a transaction's batches must have the same "
                f"column names and types (nullability and metadata aside)",
                partition=partition,
                txn_id=txn_id,
                batch=n,
                expected=first.names,
                actual=names,
            )
        bad = [
            (i, j)
            for i, j in enumerate(pick)
            if not b.schema.field(j).type.equals(first.field(i).type)
        ]
        if bad:
            raise TransactionSchemaError(
                f"{what}: batch {n} has columns {[first.names[i] for i, _ in bad]} of types "
                f"{[str(b.schema.field(j).type) for _, j in bad]}, batch 0 of types "
                f"{[str(first.field(i).type) for i, _ in bad]}; a transaction's batches must "
                f"have the same column names and types (nullability and metadata aside)",
                partition=partition,
                txn_id=txn_id,
                batch=n,
                expected=[str(first.field(i).type) for i, _ in bad],
                actual=[str(b.schema.field(j).type) for _, j in bad],
            )
        picks.append(pick)
    schema = pa.schema(
        [
            f.with_nullable(
                any(b.schema.field(p[i]).nullable for b, p in zip(batches, picks, strict=True))
            )
            for i, f in enumerate(first)
        ],
        metadata=first.metadata,
    )
    return [
        b
        if b.schema.equals(schema, check_metadata=True)
        else pa.RecordBatch.from_arrays([b.column(j) for j in pick], schema=schema)
        for b, pick in zip(batches, picks, strict=True)
    ]


def encode_staged(
    partition: str,
    txn_id: int,
    app: str,
    version: int,
    batches: Sequence[pa.RecordBatch],
    created_ns: int | None = None,
) -> bytes:
    """The bytes of a staged transaction (at least one batch, all of one schema as the
    store takes it: ValueError naming the columns otherwise). ``created_ns``: the
    staging writer's stamp of the transaction (default: now); the same arguments and
    stamp give the same bytes."""
    if not batches:
        raise InvalidArgumentError(
            "batches", 0, "at least one batch", "a staged transaction holds at least one batch"
        )
    batches = one_schema(partition, txn_id, batches)
    schema = batches[0].schema
    try:  # the same rows give the same bytes however they are chunked (a retry's own)
        batches = pa.Table.from_batches(batches, schema).combine_chunks().to_batches() or batches
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # kept as given
        pass
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
        "created_ns": time.time_ns() if created_ns is None else int(created_ns),
        "ipc": sink.getvalue().to_pybytes(),
    }
    return encode_frame(MAGIC_STAGED, body)


def decode_staged(
    where: str, raw: bytes, partition: str | None = None, txn_id: int | None = None
) -> StagedTxn:
    """Verify and decode; CorruptionError naming ``where`` when the bytes are damaged,
    or when ``partition``/``txn_id`` (its key's) are given and its body names another
    transaction: an object under another key is never taken for the key's."""
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
    if (partition is not None and staged.partition != partition) or (
        txn_id is not None and staged.txn_id != txn_id
    ):
        raise CorruptionError(
            where,
            FRAME_SIZE,
            f"names transaction {staged.txn_id} of partition {staged.partition}, "
            f"not its key's transaction {txn_id} of partition {partition}",
        )
    return staged


def stage(
    objects: ObjectStore,
    partition: str,
    txn_id: int,
    app: str,
    version: int,
    batches: Sequence[pa.RecordBatch],
    created_ns: int | None = None,
) -> int:
    """Write the staged object of a transaction (create if absent). Returns the bytes
    written: the key then holds exactly these bytes, this writer's (a retry with the
    same ``created_ns`` after a lost response finds its own bytes). Raises
    FileExistsError when the key holds any other bytes: another incarnation's
    transaction of the same id, even of the same batch and rows, is never taken for
    this one (its writer may still remove it, §10.2)."""
    data = encode_staged(partition, txn_id, app, version, batches, created_ns)
    key = staged_key(partition, txn_id)
    if not create_or_same(objects, key, data):
        raise ObjectTaken(objects.display(key), "holds another transaction")
    return len(data)


def staged_id(name: str) -> int | None:
    """The transaction id a staged object's name (``<txn_id:020d>.txn``) gives, None
    for any other name."""
    return layout.parse_staged_txn_name(name)


def staged_ids(objects: ObjectStore, partition: str) -> list[int]:
    """The transaction ids staged for ``partition`` (one listing), ascending."""
    prefix = staged_prefix(partition)
    ids = (staged_id(info.key[len(prefix) :]) for info in objects.list(prefix))
    return sorted(t for t in ids if t is not None)


def read_staged(objects: ObjectStore, partition: str, txn_id: int) -> StagedTxn | None:
    """The staged transaction, None when it is not (or no longer) there; CorruptionError
    when its bytes are damaged or name another transaction than its key."""
    key = staged_key(partition, txn_id)
    got = objects.get(key)
    return None if got is None else decode_staged(objects.display(key), got.data, partition, txn_id)


def drop_staged(objects: ObjectStore, partition: str, txn_ids: Iterable[int]) -> None:
    """Remove staged transactions (sealed or decided against); missing ones are fine."""
    for t in txn_ids:
        objects.delete(staged_key(partition, t))
