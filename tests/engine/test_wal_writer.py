"""WalWriter: numbering, flush policy, rotation, file management, schema records."""

from __future__ import annotations

import itertools
import os
import threading

import pyarrow as pa
import pytest

from quiver_spark.config import WalConfig
from quiver_spark.errors import StoreClosedError
from quiver_spark.format import (
    REC_BATCH,
    REC_SCHEMA,
    REC_STREAM,
    REC_TXN,
    WAL_HEADER_SIZE,
    WAL_RECORD_SIZE,
    encode_wal_header,
)
from quiver_spark.layout import wal_file as wal_file_name
from quiver_spark.wal import (
    WalDecoder,
    WalWriter,
    decode_txn,
    encode_txn,
    recover_wal,
    scan_wal_file,
)
from tests.faults import FaultyIO

NEVER = 3600.0  # a flush interval no test waits for


def batch(i: int, rows: int = 10) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
            "s": pa.array([f"row-{i}-{j}" for j in range(rows)]),
        }
    )


def read_back(wal_dir: str) -> list[tuple[int, int, pa.RecordBatch | None]]:
    dec = WalDecoder()
    return [(r.seq, r.rtype, dec.decode(r)) for r in recover_wal(wal_dir).records()]


def fsyncs_of(io: FaultyIO, path: str) -> list[int]:
    return [t.index for t in io.trace if t.op == "fsync" and t.path == path]


def test_records_are_numbered_from_next_record_seq_and_read_back(tmp_path):
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=41)
    seqs = [w.append_batch(batch(i), ingestion_ns=i) for i in range(3)]
    txn = w.append(REC_TXN, encode_txn("query-1", 7, "t"), ingestion_ns=5, txn_id=99)
    assert w.flush() == txn == w.durable_seq
    w.close()
    assert seqs == [42, 43, 44] and txn == 45 and w.next_seq == 46
    assert os.listdir(tmp_path) == [wal_file_name(41)]
    got = read_back(str(tmp_path))
    assert [(s, t) for s, t, _ in got] == [
        (41, REC_SCHEMA),
        (42, REC_BATCH),
        (43, REC_BATCH),
        (44, REC_BATCH),
        (45, REC_TXN),
    ]
    assert [b for _, t, b in got if t == REC_BATCH] == [batch(0), batch(1), batch(2)]
    last = list(recover_wal(str(tmp_path)).records())[-1]
    assert decode_txn(last) == {"app": "query-1", "version": 7, "tag": "t"}
    assert (last.txn_id, last.ingestion_ns) == (99, 5)


def test_waited_records_are_durable_through_the_background_flusher(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=0.01), next_record_seq=1, io=io)
    seq = w.append_batch(batch(0), ingestion_ns=0)
    write_idx = max(t.index for t in io.trace if t.op == "write")
    w.wait_durable(seq, timeout=5)
    path = w.files()[-1].path
    assert w.durable_seq >= seq
    assert any(i > write_idx for i in fsyncs_of(io, path)), "no fsync after the record's write"
    w.close()


def test_group_fsync_coalesces_many_appends_into_few_fsyncs(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=0.025), next_record_seq=1, io=io)
    seqs = [w.append(REC_TXN, encode_txn("a", i), ingestion_ns=i) for i in range(500)]
    w.wait_durable(seqs[-1], timeout=5)
    path = w.files()[-1].path
    w.close()
    n = len(fsyncs_of(io, path))  # the header's fsync included
    assert 2 <= n <= 50, f"{n} fsyncs for 500 appends"


def test_flush_interval_zero_fsyncs_inside_every_append(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=0), next_record_seq=1, io=io)
    for i in range(20):
        seq = w.append(REC_TXN, encode_txn("a", i), ingestion_ns=i)
        assert w.durable_seq == seq
    path = w.files()[-1].path
    w.close()
    assert len(fsyncs_of(io, path)) == 1 + 20


def test_flush_is_a_barrier_even_without_a_flusher_tick(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1, io=io)
    seq = w.append_batch(batch(0), ingestion_ns=0)
    assert w.durable_seq == 0
    with pytest.raises(TimeoutError):
        w.wait_durable(seq, timeout=0.05)
    before = len(fsyncs_of(io, w.files()[-1].path))
    assert w.flush() == seq
    assert len(fsyncs_of(io, w.files()[-1].path)) == before + 1
    assert w.flush() == seq  # nothing new: no second fsync
    assert len(fsyncs_of(io, w.files()[-1].path)) == before + 1
    w.close()


def test_concurrent_appenders_all_become_durable(tmp_path):
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=0.005), next_record_seq=1)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for i in range(50):
                w.wait_durable(w.append(REC_TXN, encode_txn(f"t{t}", i), ingestion_ns=i), 10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    assert not errors
    recs = list(recover_wal(str(tmp_path)).records())
    assert [r.seq for r in recs] == list(range(1, 201))
    assert sorted((d["app"], d["version"]) for d in map(decode_txn, recs)) == sorted(
        (f"t{t}", i) for t in range(4) for i in range(50)
    )


def test_rotation_by_size_keeps_files_under_the_limit_and_named_by_first_seq(tmp_path):
    io = FaultyIO()
    cfg = WalConfig(flush_interval_s=NEVER, file_size_bytes=8 * 1024)
    w = WalWriter(str(tmp_path), cfg, next_record_seq=1, io=io)
    for i in range(30):
        w.append_batch(batch(i, rows=20), ingestion_ns=i)
    infos = w.files()
    assert len(infos) >= 3
    for info in infos:
        assert os.path.basename(info.path) == wal_file_name(info.first_seq)
        assert info.size == os.path.getsize(info.path) <= cfg.file_size_bytes
    assert w.total_bytes == sum(i.size for i in infos)
    # each sealed file was fdatasynced before its successor was created
    for old, new in itertools.pairwise(infos):
        create = next(t.index for t in io.trace if t.op == "open" and t.path == new.path)
        assert any(i < create for i in fsyncs_of(io, old.path)[1:])
    w.close()
    assert [b for _, t, b in read_back(str(tmp_path)) if t == REC_BATCH] == [
        batch(i, rows=20) for i in range(30)
    ]


def test_rotate_seals_the_file_and_the_next_append_opens_a_new_one(tmp_path):
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    w.rotate()  # nothing open: no-op
    w.append(REC_TXN, encode_txn("a", 1), ingestion_ns=0)
    w.rotate()
    assert w.durable_seq == 1
    w.append(REC_TXN, encode_txn("a", 2), ingestion_ns=0)
    assert [f.first_seq for f in w.files()] == [1, 2]
    w.close()


def test_files_include_preexisting_ones_and_are_never_appended_to(tmp_path):
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    w.append(REC_TXN, encode_txn("a", 1), ingestion_ns=0)
    w.close()
    w.close()  # idempotent
    first = w.files()[0]
    w2 = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=2)
    assert w2.files() == [first] and w2.total_bytes == first.size
    w2.append(REC_TXN, encode_txn("a", 2), ingestion_ns=0)
    assert [f.first_seq for f in w2.files()] == [1, 2]
    assert os.path.getsize(first.path) == first.size
    w2.close()
    assert [r.seq for r in recover_wal(str(tmp_path)).records()] == [1, 2]


def test_writer_refuses_to_overwrite_a_file_at_or_after_its_seq(tmp_path):
    (tmp_path / wal_file_name(5)).write_bytes(encode_wal_header(5, 0) + b"x" * 40)
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=5)
    with pytest.raises(Exception, match="recover the wal"):
        w.append(REC_TXN, encode_txn("a", 1), ingestion_ns=0)
    w.close()


def test_delete_files_unlinks_durably_and_refuses_the_current_file(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1, io=io)
    for i in range(3):
        w.append(REC_TXN, encode_txn("a", i), ingestion_ns=0)
        w.rotate()
    w.append(REC_TXN, encode_txn("a", 9), ingestion_ns=0)
    infos = w.files()
    with pytest.raises(ValueError, match="current wal file"):
        w.delete_files([infos[0], infos[-1]])
    assert all(os.path.exists(i.path) for i in infos)
    total = w.total_bytes
    w.delete_files(infos[:2])
    assert w.files() == infos[2:]
    assert w.total_bytes == total - infos[0].size - infos[1].size
    unlinks = [t.index for t in io.trace if t.op == "unlink"]
    dir_syncs = [t.index for t in io.trace if t.op == "fsync_dir" and t.path == str(tmp_path)]
    assert len(unlinks) == 2 and any(d > max(unlinks) for d in dir_syncs)
    assert not os.path.exists(infos[0].path) and not os.path.exists(infos[1].path)
    w.close()


def test_schema_is_written_once_at_the_start_of_each_file(tmp_path):
    cfg = WalConfig(flush_interval_s=NEVER, file_size_bytes=4 * 1024)
    w = WalWriter(str(tmp_path), cfg, next_record_seq=1)
    for i in range(20):
        w.append_batch(batch(i), ingestion_ns=i)
    w.close()
    infos = w.files()
    assert len(infos) >= 2
    for n, info in enumerate(infos):
        types = [r.rtype for r in scan_wal_file(info.path, last=n == len(infos) - 1).records]
        assert types[0] == REC_SCHEMA and types.count(REC_SCHEMA) == 1
        assert set(types[1:]) == {REC_BATCH}
    assert [b for _, t, b in read_back(str(tmp_path)) if t == REC_BATCH] == [
        batch(i) for i in range(20)
    ]


def test_a_schema_change_mid_file_writes_a_new_schema_record(tmp_path):
    other = pa.record_batch({"x": pa.array([1.5, 2.5])})
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    w.append_batch(batch(0), ingestion_ns=0)
    w.append_batch(batch(1), ingestion_ns=0)
    w.append_batch(other, ingestion_ns=0)
    w.append_batch(batch(2), ingestion_ns=0)
    w.close()
    got = read_back(str(tmp_path))
    assert [t for _, t, _ in got] == [
        REC_SCHEMA,
        REC_BATCH,
        REC_BATCH,
        REC_SCHEMA,
        REC_BATCH,
        REC_SCHEMA,
        REC_BATCH,
    ]
    assert [b for _, t, b in got if t == REC_BATCH] == [batch(0), batch(1), other, batch(2)]


def test_dictionary_columns_round_trip_as_self_contained_stream_records(tmp_path):
    d1 = pa.record_batch({"k": pa.array(["a", "b", "a"]).dictionary_encode(), "v": [1, 2, 3]})
    d2 = pa.record_batch({"k": pa.array(["z", "y"]).dictionary_encode(), "v": [4, 5]})
    nested = pa.record_batch(
        {"l": pa.array([["p", "q"], ["p"]], pa.list_(pa.dictionary(pa.int8(), pa.string())))}
    )
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    for b in (d1, d2, nested):
        w.append_batch(b, ingestion_ns=0)
    w.close()
    got = read_back(str(tmp_path))
    assert [t for _, t, _ in got] == [REC_STREAM] * 3
    assert [b for _, _, b in got] == [d1, d2, nested]
    assert got[1][2].column("k").dictionary.to_pylist() == ["z", "y"]


def test_each_record_is_one_write_of_header_and_payload(tmp_path):
    io = FaultyIO()
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1, io=io)
    w.append_batch(batch(0), ingestion_ns=0)
    n = len(io.ops("write"))
    w.append_batch(batch(1), ingestion_ns=0)
    writes = io.ops("write")[n:]
    assert len(writes) == 1
    assert writes[0].size == WAL_RECORD_SIZE + batch(1).serialize().size
    w.close()
    assert w.files()[0].size == WAL_HEADER_SIZE + sum(t.size for t in io.ops("write")[1:])


def test_append_refuses_schema_and_batch_records_and_a_closed_writer(tmp_path):
    w = WalWriter(str(tmp_path), WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    for rtype in (REC_SCHEMA, REC_BATCH, 99):
        with pytest.raises(ValueError):
            w.append(rtype, b"x", ingestion_ns=0)
    w.close()
    with pytest.raises(StoreClosedError):
        w.append(REC_TXN, b"x", ingestion_ns=0)
    with pytest.raises(StoreClosedError):
        w.flush()
    assert os.listdir(tmp_path) == []
