"""Appending to the write-ahead log: framing, group fsync, rotation (ARCHITECTURE.md §4.1-§4.2).

A :class:`WalWriter` owns the WAL directory of one partition. It never appends to a
file it did not create: the first append after construction creates
``<first_record_seq:020d>.wal``. Durability follows the flush policy: a background
thread fdatasyncs the current file every ``flush_interval_s`` when something is
unsynced (group commit); with ``flush_interval_s == 0`` every append fdatasyncs.

Any failed write or fsync makes the instance permanently failed (PostgreSQL's
fsyncgate lesson): later calls raise :class:`~quiver_spark.errors.WalFailedError`
chained to the original ``OSError``, the failed file is never synced again and no
sequence number after the failure is ever reported durable. The instance keeps what
it wrote since its last successful fsync (:meth:`WalWriter.unsynced`, references to
the caller's objects, not copies): the partition writer cuts the failed file at a
seq recorded in STATE and writes the records it keeps again, with the same seqs,
into a new file (:meth:`WalWriter.rewrite`; ARCHITECTURE.md §9.4).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TypeAlias

import msgpack
import pyarrow as pa

from .. import layout
from ..config import WalConfig
from ..errors import (
    InvalidArgumentError,
    StoreClosedError,
    WalFailedError,
    WalNotRecoveredError,
    WalTimeoutError,
)
from ..format import (
    REC_BATCH,
    REC_SCHEMA,
    REC_STREAM,
    REC_TXN,
    WAL_HEADER_SIZE,
    WAL_MAX_PAYLOAD,
    WAL_RECORD_SIZE,
    encode_record_header,
    encode_wal_header,
)
from ..fs import DEFAULT_IO, FileIO

log = logging.getLogger(__name__)

Payload: TypeAlias = bytes | memoryview | pa.Buffer


@dataclass(frozen=True)
class WalCarry:
    """A record written but not yet fsynced, as :meth:`WalWriter.rewrite` writes it again.

    ``obj`` is the schema of a ``REC_SCHEMA``, the batch of a ``REC_BATCH`` or
    ``REC_STREAM`` record, the payload bytes of a ``REC_TXN`` record.
    """

    seq: int
    rtype: int
    ingestion_ns: int
    txn_id: int
    obj: pa.Schema | pa.RecordBatch | bytes


@dataclass(frozen=True)
class WalFileInfo:
    """One WAL file: the seq of its first record, its path and its size in bytes."""

    first_seq: int
    path: str
    size: int


def list_wal_files(wal_dir: str, io: FileIO = DEFAULT_IO) -> list[WalFileInfo]:
    """The ``*.wal`` files in ``wal_dir`` sorted by first record seq (one stat each)."""
    out = []
    for name in io.listdir(wal_dir):
        seq = layout.parse_wal_file(name)
        if seq is not None:
            path = os.path.join(wal_dir, name)
            out.append(WalFileInfo(seq, path, io.size(path)))
    return sorted(out, key=lambda f: f.first_seq)


def encode_txn(app: str, version: int, tag: str = "") -> bytes:
    """The msgpack payload of a ``REC_TXN`` record."""
    return msgpack.packb({"app": app, "version": version, "tag": tag}, use_bin_type=True)


def has_dictionary(schema: pa.Schema) -> bool:
    """True when any field (at any nesting depth) is dictionary-encoded."""

    def walk(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            return True
        return any(walk(t.field(i).type) for i in range(t.num_fields))

    return any(walk(f.type) for f in schema)


class WalWriter:
    """Appends records to the WAL files of one partition.

    Parameters
    ----------
    wal_dir
        Directory holding ``<first_record_seq:020d>.wal`` files (created if missing).
    config
        ``flush_interval_s`` (group-fsync period, 0 = fsync per append) and
        ``file_size_bytes`` (rotation threshold).
    next_record_seq
        Seq of the next record, as returned by recovery; seqs start at 1.
    io
        The file layer; tests pass a fault-injecting one.

    Notes
    -----
    Thread-safe. Appends hold ``_cond``'s lock while writing; fdatasync runs outside
    it (one at a time, ``_syncing``) so appends continue during a group fsync.
    """

    def __init__(
        self, wal_dir: str, config: WalConfig, *, next_record_seq: int, io: FileIO = DEFAULT_IO
    ) -> None:
        if next_record_seq < 1:
            raise InvalidArgumentError(
                "next_record_seq",
                next_record_seq,
                ">= 1",
                f"next_record_seq must be >= 1, got {next_record_seq}",
            )
        self._dir = wal_dir
        self._config = config
        self._io = io
        io.mkdir(wal_dir)
        self._sealed = list_wal_files(wal_dir, io)
        self._sealed_bytes = sum(f.size for f in self._sealed)
        self._cond = threading.Condition()
        self._next_seq = next_record_seq
        self._written_seq = next_record_seq - 1  # highest seq fully written
        self._durable_seq = next_record_seq - 1  # highest seq fdatasynced
        self._fd: int | None = None
        self._path = ""
        self._first_seq = 0
        self._file_bytes = 0
        self._file_schema: pa.Schema | None = None
        self._syncing = False
        self._failed: OSError | None = None
        self._closed = False
        self._unsynced: list[WalCarry] = []  # written after the last successful fsync
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if config.flush_interval_s > 0:
            self._flusher = threading.Thread(
                target=self._flush_loop, name=f"quiver-wal-flusher:{wal_dir}", daemon=True
            )
            self._flusher.start()

    # -- properties -----------------------------------------------------------------
    @property
    def durable_seq(self) -> int:
        """Highest seq known durable (0 or ``next_record_seq - 1`` before any append)."""
        return self._durable_seq

    @property
    def next_seq(self) -> int:
        """Seq the next record will get."""
        return self._next_seq

    @property
    def total_bytes(self) -> int:
        """Bytes of all WAL files in the directory, the current one included (no stat)."""
        return self._sealed_bytes + self._file_bytes

    @property
    def failed(self) -> bool:
        """True once a write or fsync failed; the instance is then unusable."""
        return self._failed is not None

    @property
    def failure(self) -> WalFailedError | None:
        """The error later calls raise once the instance failed (None while healthy)."""
        if self._failed is None:
            return None
        err = self._failed_error()
        err.__cause__ = self._failed
        return err

    # -- appending --------------------------------------------------------------------
    def append(
        self,
        rtype: int,
        payload: Payload,
        *,
        ingestion_ns: int,
        txn_id: int = 0,
        batch: pa.RecordBatch | None = None,
    ) -> int:
        """Append one ``REC_STREAM`` or ``REC_TXN`` record; return its seq.

        ``REC_SCHEMA``/``REC_BATCH`` go through :meth:`append_batch`, which keeps the
        schema-once-per-file invariant. Durable on return only when
        ``flush_interval_s == 0``; otherwise see :meth:`flush` and :meth:`wait_durable`.
        """
        if rtype not in (REC_STREAM, REC_TXN):
            raise InvalidArgumentError(
                "rtype",
                rtype,
                "REC_STREAM or REC_TXN",
                f"append() takes REC_STREAM or REC_TXN records, got type {rtype}",
            )
        keep: pa.RecordBatch | bytes = batch if batch is not None else bytes(payload)
        with self._cond:
            self._check_usable()
            self._prepare(WAL_RECORD_SIZE + len(payload))
            seq = self._write(rtype, payload, ingestion_ns, txn_id, keep)
        self._after_append(seq)
        return seq

    def append_batch(self, batch: pa.RecordBatch, *, ingestion_ns: int, txn_id: int = 0) -> int:
        """Append an Arrow record batch; return the seq of its batch record.

        A ``REC_SCHEMA`` record precedes it when the file is new or the schema changed;
        a schema with dictionary fields is written as one self-contained ``REC_STREAM``.
        """
        return self.append_batches([batch], ingestion_ns=ingestion_ns, txn_id=txn_id)[-1]

    def append_batches(
        self, batches: list[pa.RecordBatch], *, ingestion_ns: int, txn_id: int = 0
    ) -> list[int]:
        """Append several batches as one call (one fsync when ``flush_interval_s == 0``);
        return the seq of each batch record."""
        seqs = []
        for batch in batches:
            schema = batch.schema
            if has_dictionary(schema):
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, schema) as w:
                    w.write_batch(batch)
                payload = sink.getvalue()
                with self._cond:
                    self._check_usable()
                    self._prepare(WAL_RECORD_SIZE + len(payload))
                    seqs.append(self._write(REC_STREAM, payload, ingestion_ns, txn_id, batch))
                continue
            body = batch.serialize()
            with self._cond:
                self._check_usable()
                need_schema = self._file_schema is None or not self._file_schema.equals(
                    schema, check_metadata=True
                )
                schema_buf = schema.serialize() if need_schema else None
                extra = WAL_RECORD_SIZE + len(schema_buf) if schema_buf is not None else 0
                if self._prepare(WAL_RECORD_SIZE + len(body) + extra) and schema_buf is None:
                    schema_buf = schema.serialize()  # rotated: every file starts with its schema
                if schema_buf is not None:
                    self._write(REC_SCHEMA, schema_buf, ingestion_ns, txn_id, schema)
                    self._file_schema = schema
                seqs.append(self._write(REC_BATCH, body, ingestion_ns, txn_id, batch))
        if seqs:
            self._after_append(seqs[-1])
        return seqs

    def rewrite(self, records: list[WalCarry]) -> None:
        """Write ``records`` again, each with its own seq (the next ones of this writer).

        Used after a failure, on a writer created at the first record's seq: a batch
        whose schema the new file does not hold yet is written as a self-contained
        ``REC_STREAM``, so no record is added and the seqs stay those of the original
        records. Durable once :meth:`flush` returns.
        """
        with self._cond:
            self._check_usable()
            for rec in records:
                if rec.seq != self._next_seq:
                    raise InvalidArgumentError(
                        "records",
                        rec.seq,
                        f"records in seq order from the next seq {self._next_seq}",
                        f"rewrite of record {rec.seq} at seq {self._next_seq}",
                    )
                obj = rec.obj
                if isinstance(obj, pa.Schema):
                    buf = obj.serialize()
                    self._prepare(WAL_RECORD_SIZE + len(buf))
                    self._write(REC_SCHEMA, buf, rec.ingestion_ns, rec.txn_id, obj)
                    self._file_schema = obj
                elif isinstance(obj, pa.RecordBatch):
                    body = obj.serialize()
                    opened = self._prepare(WAL_RECORD_SIZE + len(body))
                    schema = self._file_schema
                    if (
                        rec.rtype == REC_BATCH
                        and not opened
                        and schema is not None
                        and schema.equals(obj.schema, check_metadata=True)
                    ):
                        self._write(REC_BATCH, body, rec.ingestion_ns, rec.txn_id, obj)
                    else:
                        sink = pa.BufferOutputStream()
                        with pa.ipc.new_stream(sink, obj.schema) as w:
                            w.write_batch(obj)
                        payload = sink.getvalue()
                        self._write(REC_STREAM, payload, rec.ingestion_ns, rec.txn_id, obj)
                else:
                    self._prepare(WAL_RECORD_SIZE + len(obj))
                    self._write(rec.rtype, obj, rec.ingestion_ns, rec.txn_id, obj)

    def unsynced(self) -> list[WalCarry]:
        """The records written after the last successful fsync, in seq order."""
        with self._cond:
            return list(self._unsynced)

    def _prepare(self, nbytes: int) -> bool:
        """Rotate if ``nbytes`` would overflow a non-empty file; open one if none.

        Returns True when a new file was opened (its schema is then unknown).
        """
        if self._fd is not None and self._file_bytes > WAL_HEADER_SIZE:
            if self._file_bytes + nbytes > self._config.file_size_bytes:
                self._seal_locked()
        if self._fd is None:
            self._open_locked()
            return True
        return False

    def _write(
        self,
        rtype: int,
        payload: Payload,
        ingestion_ns: int,
        txn_id: int,
        keep: pa.Schema | pa.RecordBatch | bytes,
    ) -> int:
        if len(payload) >= WAL_MAX_PAYLOAD:
            raise InvalidArgumentError(
                "payload",
                len(payload),
                f"fewer than {WAL_MAX_PAYLOAD} bytes",
                f"wal record payload of {len(payload)} bytes exceeds 2 GiB",
            )
        assert self._fd is not None
        seq = self._next_seq
        head = encode_record_header(rtype, seq, ingestion_ns, txn_id, payload)
        try:
            self._io.writev(self._fd, [head, payload])
        except OSError as e:
            raise self._fail_locked("write", e) from e
        n = WAL_RECORD_SIZE + len(payload)
        self._file_bytes += n
        self._next_seq = seq + 1
        self._written_seq = seq
        self._unsynced.append(WalCarry(seq, rtype, ingestion_ns, txn_id, keep))
        return seq

    def _after_append(self, seq: int) -> None:
        if self._config.flush_interval_s == 0:
            self._sync_to(seq)

    # -- durability ---------------------------------------------------------------------
    def flush(self) -> int:
        """Make everything appended before the call durable; return the durable seq."""
        with self._cond:
            self._check_usable()
            target = self._written_seq
        self._sync_to(target)
        return self._durable_seq

    def wait_durable(self, seq: int, timeout: float | None = None) -> None:
        """Block until ``seq`` is durable.

        Raises
        ------
        WalFailedError
            The writer failed before ``seq`` became durable.
        TimeoutError
            ``timeout`` seconds passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if seq >= self._next_seq:
                raise InvalidArgumentError(
                    "seq",
                    seq,
                    f"a seq appended already (below the next seq {self._next_seq})",
                    f"seq {seq} was not appended (next seq {self._next_seq})",
                )
            while self._durable_seq < seq:
                self._check_failed()
                if self._closed or self._flusher is None:
                    self._cond.release()
                    try:
                        self._sync_to(seq)  # no flusher to wait for: sync ourselves
                    finally:
                        self._cond.acquire()
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WalTimeoutError(seq, timeout)
                self._cond.wait(left)

    def _sync_to(self, target: int) -> None:
        """fdatasync the current file until ``durable_seq >= target`` (one sync at a time)."""
        with self._cond:
            while True:
                self._check_failed()
                if self._durable_seq >= target:
                    return
                if not self._syncing:
                    break
                self._cond.wait()
            if self._fd is None:  # closed after a seal synced everything
                raise StoreClosedError(f"wal writer for {self._dir} is closed")
            self._syncing = True
            fd, upto, path = self._fd, self._written_seq, self._path
        try:
            self._io.fdatasync(fd)
        except OSError as e:
            with self._cond:
                self._syncing = False
                err = self._fail_locked("fsync", e, path)
            raise err from e
        with self._cond:
            self._syncing = False
            if self._failed is None:
                self._durable_seq = max(self._durable_seq, upto)
                self._unsynced = [r for r in self._unsynced if r.seq > self._durable_seq]
            self._cond.notify_all()

    def _flush_loop(self) -> None:
        interval = self._config.flush_interval_s
        while not self._stop.wait(interval):
            if self._failed is not None:
                return
            if self._written_seq > self._durable_seq and not self._syncing:
                try:
                    self._sync_to(self._written_seq)
                except (WalFailedError, StoreClosedError):
                    return

    # -- files --------------------------------------------------------------------------
    def _open_locked(self) -> None:
        seq = self._next_seq
        path = os.path.join(self._dir, layout.wal_file(seq))
        if any(f.first_seq >= seq for f in self._sealed):
            raise WalNotRecoveredError(self._dir, seq)
        fd = None
        try:
            fd = self._io.open_create(path)
            self._fd, self._path = fd, path
            self._io.write(fd, encode_wal_header(seq, time.time_ns()))
            self._io.fsync(fd)
            self._io.fsync_dir(self._dir)
        except OSError as e:
            raise self._fail_locked("create", e, path) from e
        self._first_seq = seq
        self._file_bytes = WAL_HEADER_SIZE
        self._file_schema = None
        log.info("quiver.wal.open %s first_seq=%d", path, seq)

    def _seal_locked(self) -> None:
        """fdatasync and close the current file; it joins the sealed list."""
        while self._syncing:
            self._cond.wait()
        self._check_failed()
        assert self._fd is not None
        try:
            self._io.fdatasync(self._fd)
        except OSError as e:
            raise self._fail_locked("fsync", e) from e
        self._durable_seq = self._written_seq
        self._unsynced = []
        self._cond.notify_all()
        self._io.close(self._fd)
        info = WalFileInfo(self._first_seq, self._path, self._file_bytes)
        self._sealed.append(info)
        self._sealed_bytes += info.size
        self._fd, self._file_bytes, self._file_schema = None, 0, None
        log.info(
            "quiver.wal.rotate %s size=%d last_seq=%d", info.path, info.size, self._written_seq
        )

    def rotate(self) -> None:
        """Seal the current file (fdatasync, close); the next append opens a new one."""
        with self._cond:
            self._check_usable()
            if self._fd is not None:
                self._seal_locked()

    @property
    def current_path(self) -> str | None:
        """The file appends go to now, or None after a rotation (until the next append)."""
        with self._cond:
            return self._path if self._fd is not None else None

    def files(self) -> list[WalFileInfo]:
        """All WAL files sorted by first seq, pre-existing ones and the current one."""
        with self._cond:
            out = list(self._sealed)
            if self._fd is not None:
                out.append(WalFileInfo(self._first_seq, self._path, self._file_bytes))
        return out

    def delete_files(self, infos: list[WalFileInfo]) -> None:
        """Durably delete sealed files (unlink, fsync dir); the current file is refused."""
        with self._cond:
            paths = {i.path for i in infos}
            if self._fd is not None and self._path in paths:
                raise InvalidArgumentError(
                    "infos",
                    self._path,
                    "sealed wal files only",
                    f"refusing to delete the current wal file {self._path}",
                )
            self._io.durable_unlink(sorted(paths))
            gone = [f for f in self._sealed if f.path in paths]
            self._sealed = [f for f in self._sealed if f.path not in paths]
            self._sealed_bytes -= sum(f.size for f in gone)
        for f in gone:
            log.info("quiver.wal.delete %s first_seq=%d size=%d", f.path, f.first_seq, f.size)

    def close(self) -> None:
        """Flush, stop the flusher and close the file; idempotent.

        A writer that already failed closes quietly (its error was raised before); a
        failure of the final flush is raised after everything is released.
        """
        with self._cond:
            if self._closed:
                return
        err: BaseException | None = None
        if self._failed is None:
            try:
                self.flush()
            except WalFailedError as e:
                err = e
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._cond:
            self._closed = True
            while self._syncing:
                self._cond.wait()
            if self._fd is not None:
                fd, self._fd = self._fd, None
                self._sealed.append(WalFileInfo(self._first_seq, self._path, self._file_bytes))
                self._sealed_bytes += self._file_bytes
                self._file_bytes = 0
                try:
                    self._io.close(fd)
                except OSError as e:  # close cannot make anything durable or not
                    log.warning("quiver.wal.close_failed %s: %s", self._path, e)
            self._cond.notify_all()
        if err is not None:
            raise err

    # -- failure ------------------------------------------------------------------------
    def _fail_locked(self, op: str, e: OSError, path: str | None = None) -> WalFailedError:
        """Record the first failure, wake waiters, return the error to raise."""
        if self._failed is None:
            self._failed = e
            log.error(
                "quiver.wal.failed op=%s path=%s errno=%s durable_seq=%d: %s",
                op,
                path or self._path,
                e.errno,
                self._durable_seq,
                e,
            )
        self._cond.notify_all()
        return self._failed_error()

    def _failed_error(self) -> WalFailedError:
        e = self._failed
        assert e is not None
        return WalFailedError(
            e.errno,
            f"wal writer for {self._dir} failed ({e}); nothing after seq {self._durable_seq} "
            "is durable; the partition's next call recovers it from disk into a new wal file",
        )

    def _check_failed(self) -> None:
        if self._failed is not None:
            raise self._failed_error() from self._failed

    def _check_usable(self) -> None:
        self._check_failed()
        if self._closed:
            raise StoreClosedError(f"wal writer for {self._dir} is closed")
