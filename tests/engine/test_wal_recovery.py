"""WAL recovery: torn tails are cut, every other damage is named (ARCHITECTURE.md §9.3)."""

from __future__ import annotations

import os
import random
import shutil
import struct

import pyarrow as pa
import pytest

from quiver_spark.config import WalConfig
from quiver_spark.errors import ChecksumMismatchError, CorruptionError, VersionError
from quiver_spark.format import (
    REC_TXN,
    WAL_HEADER,
    WAL_HEADER_SIZE,
    checksum,
    encode_record_header,
    encode_wal_header,
)
from quiver_spark.layout import wal_file as wal_file_name
from quiver_spark.wal import WalDecoder, WalWriter, encode_txn, recover_wal, scan_wal_file
from tests.damage import append_garbage, flip_bit, truncate_by
from tests.faults import FaultyIO

NEVER = 3600.0


def batch(i: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array([i, i + 1, i + 2], pa.int64()), "s": [f"v{i}"] * 3})


def build_wal(wal_dir: str, n_files: int = 2, per_file: int = 4) -> list[tuple[int, bytes]]:
    """Write ``n_files`` files of schema + ``per_file`` batches; return (seq, payload) pairs."""
    w = WalWriter(wal_dir, WalConfig(flush_interval_s=NEVER), next_record_seq=1)
    for f in range(n_files):
        for i in range(per_file):
            w.append_batch(batch(f * 100 + i), ingestion_ns=i)
        w.append(REC_TXN, encode_txn("q", f), ingestion_ns=0)
        if f < n_files - 1:
            w.rotate()
    w.close()
    return [(r.seq, bytes(r.payload)) for r in recover_wal(wal_dir).records()]


def record_spans(path: str) -> list[tuple[int, int, int]]:
    """(start, end, seq) of every record of an intact file."""
    return [
        (r.offset, r.offset + 36 + len(r.payload), r.seq)
        for r in scan_wal_file(path, last=False).records
    ]


def copy_dir(src: str, dst: str) -> str:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


# -- torn tails ------------------------------------------------------------------


def test_cutting_the_last_file_at_every_offset_recovers_the_exact_prefix(tmp_path):
    pristine = str(tmp_path / "pristine")
    expected = build_wal(pristine)
    last_name = sorted(os.listdir(pristine))[-1]
    last_path = os.path.join(pristine, last_name)
    size = os.path.getsize(last_path)
    spans = record_spans(last_path)
    first_seq_last = spans[0][2]
    offsets = sorted(set(range(WAL_HEADER_SIZE + 1)) | set(range(spans[-2][0], size + 1)))
    checked = 0
    for cut in offsets:
        d = copy_dir(pristine, str(tmp_path / "work"))
        os.truncate(os.path.join(d, last_name), cut)
        rec = recover_wal(d)
        kept = [s for start, end, s in spans if end <= cut]
        want = [p for p in expected if p[0] < first_seq_last or p[0] in kept]
        assert [(r.seq, bytes(r.payload)) for r in rec.records()] == want, cut
        valid = max([end for _, end, _ in spans if end <= cut], default=WAL_HEADER_SIZE)
        if not kept:  # header (torn or whole) only: the file is removed
            assert not os.path.exists(os.path.join(d, last_name))
            assert rec.next_record_seq == first_seq_last
            torn_header = 0 < cut < WAL_HEADER_SIZE
            assert rec.torn == ([(os.path.join(d, last_name), 0, cut)] if torn_header else [])
        else:
            assert os.path.getsize(os.path.join(d, last_name)) == valid
            assert rec.torn == (
                [] if cut == valid else [(os.path.join(d, last_name), valid, cut - valid)]
            )
            assert rec.next_record_seq == kept[-1] + 1
        # the next append after reopening works and reads back
        w = WalWriter(d, WalConfig(flush_interval_s=0), next_record_seq=rec.next_record_seq)
        seq = w.append_batch(batch(999), ingestion_ns=1)
        w.close()
        del rec
        again = recover_wal(d)
        assert again.torn == []
        dec = WalDecoder()
        got = [(r.seq, dec.decode(r)) for r in again.records()]
        assert [s for s, _ in got][: len(want)] == [s for s, _ in want]
        assert got[-1] == (seq, batch(999))
        checked += 1
    assert checked == len(offsets) >= 2 * 100


# -- bit flips and other damage ----------------------------------------------------


def _unit_of(spans: list[tuple[int, int, int]], offset: int) -> tuple[int, int | None]:
    """(start of the header or record holding ``offset``, that record's seq or None)."""
    if offset < WAL_HEADER_SIZE:
        return 0, None
    for start, end, seq in spans:
        if start <= offset < end:
            return start, seq
    raise AssertionError(offset)


def test_every_single_bit_flip_is_detected_and_salvage_counts_it(tmp_path):
    pristine = str(tmp_path / "pristine")
    expected = build_wal(pristine)
    names = sorted(os.listdir(pristine))
    spans = {n: record_spans(os.path.join(pristine, n)) for n in names}
    sizes = {n: os.path.getsize(os.path.join(pristine, n)) for n in names}
    rng = random.Random(20261125)
    flips = 400
    detected = torn_cuts = salvaged = 0
    for _ in range(flips):
        name = rng.choice(names)
        offset, bit = rng.randrange(sizes[name]), rng.randrange(8)
        is_last = name == names[-1]
        unit, seq = _unit_of(spans[name], offset)
        in_final_record = is_last and unit == spans[name][-1][0]
        d = copy_dir(pristine, str(tmp_path / "work"))
        path = os.path.join(d, name)
        flip_bit(path, offset, bit)
        try:
            rec = recover_wal(d)
        except CorruptionError as e:
            assert (e.path, e.offset) == (path, unit), (name, offset, str(e))
            assert f"{path}:{unit}" in str(e)
            detected += 1
        else:
            # the only accepted outcome without an error: the final record cut as torn
            assert in_final_record, f"silent: flip at {name}:{offset} bit {bit}"
            assert rec.torn == [(path, unit, sizes[name] - unit)]
            assert [(r.seq, bytes(r.payload)) for r in rec.records()] == expected[:-1]
            detected += 1
            torn_cuts += 1
        # salvage: the damaged unit is skipped and counted, everything else kept
        d = copy_dir(pristine, str(tmp_path / "work"))
        flip_bit(os.path.join(d, name), offset, bit)
        rec = recover_wal(d, salvage=True)
        skipped = [s for scan in rec.scans for s in scan.skipped]
        got = [(r.seq, bytes(r.payload)) for r in rec.records()]
        if in_final_record:
            assert got == expected[:-1] and rec.torn
        else:
            assert unit in {o for o, _ in skipped}, skipped
            assert got == [p for p in expected if p[0] != seq]
            salvaged += 1
    assert detected == flips and torn_cuts < flips // 4 and salvaged == flips - torn_cuts


# -- torn tail vs corruption --------------------------------------------------------


@pytest.fixture
def wal(tmp_path):
    d = str(tmp_path / "wal")
    expected = build_wal(d)
    names = sorted(os.listdir(d))
    return d, [os.path.join(d, n) for n in names], expected


def test_an_all_zero_remainder_of_the_last_file_is_a_torn_tail(wal):
    d, paths, expected = wal
    size = os.path.getsize(paths[-1])
    append_garbage(paths[-1], b"\0" * 4096)
    rec = recover_wal(d)
    assert rec.torn == [(paths[-1], size, 4096)]
    assert os.path.getsize(paths[-1]) == size
    assert [(r.seq, bytes(r.payload)) for r in rec.records()] == expected


def test_garbage_after_the_last_record_is_a_torn_tail(wal):
    d, paths, expected = wal
    size = os.path.getsize(paths[-1])
    append_garbage(paths[-1], random.Random(1).randbytes(1000))
    rec = recover_wal(d)
    assert rec.torn == [(paths[-1], size, 1000)]
    assert len(list(rec.records())) == len(expected)


def test_a_truncated_non_last_file_is_corruption_naming_file_and_offset(wal):
    d, paths, _ = wal
    last_start = record_spans(paths[0])[-1][0]
    truncate_by(paths[0], 1)
    with pytest.raises(CorruptionError, match="truncated") as e:
        recover_wal(d)
    assert (e.value.path, e.value.offset) == (paths[0], last_start)


def test_a_mid_file_crc_mismatch_is_an_error_with_stored_and_computed_values(wal):
    d, paths, _ = wal
    start, end, _ = record_spans(paths[-1])[1]
    flip_bit(paths[-1], end - 1, 3)
    with pytest.raises(ChecksumMismatchError, match=r"wal record crc mismatch: stored 0x") as e:
        recover_wal(d)
    assert e.value.offset == start and e.value.stored != e.value.computed
    assert os.path.getsize(paths[-1]) > end  # nothing was cut


def test_a_bad_record_followed_by_a_valid_one_is_not_a_torn_tail(wal):
    d, paths, _ = wal
    spans = record_spans(paths[-1])
    start = spans[-2][0]
    flip_bit(paths[-1], start + 4, 6)  # payload_len grows past EOF
    with pytest.raises(CorruptionError, match="truncated") as e:
        recover_wal(d)
    assert e.value.offset == start


def _raw_file(path: str, first: int, seqs: list[int]) -> None:
    out = bytearray(encode_wal_header(first, 0))
    for s in seqs:
        payload = encode_txn("a", s)
        out += encode_record_header(REC_TXN, s, 0, 0, payload) + payload
    with open(path, "wb") as f:
        f.write(out)


def test_a_seq_that_does_not_increase_by_one_is_corruption_and_salvage_counts_it(tmp_path):
    path = str(tmp_path / wal_file_name(1))
    _raw_file(path, 1, [1, 2, 4, 5, 5, 6])
    with pytest.raises(CorruptionError, match="seq 4, expected 3"):
        recover_wal(str(tmp_path))
    rec = recover_wal(str(tmp_path), salvage=True)
    assert [r.seq for r in rec.records()] == [1, 2, 4, 5, 6]
    assert [why for _, why in rec.scans[0].skipped] == [
        "wal record seq 4, expected 3",
        "wal record seq 5, expected 6",
    ]
    assert rec.next_record_seq == 7


def test_a_missing_middle_file_breaks_continuity(tmp_path):
    _raw_file(str(tmp_path / wal_file_name(1)), 1, [1, 2])
    _raw_file(str(tmp_path / wal_file_name(3)), 3, [3])
    _raw_file(str(tmp_path / wal_file_name(4)), 4, [4, 5])
    os.unlink(tmp_path / wal_file_name(3))
    with pytest.raises(CorruptionError, match="not contiguous: expected first seq 3, found 4"):
        recover_wal(str(tmp_path))
    rec = recover_wal(str(tmp_path), salvage=True)
    assert [r.seq for r in rec.records()] == [1, 2, 4, 5]
    assert rec.scans[1].skipped[0][0] == 0


def test_a_header_only_last_file_is_removed_and_its_seq_kept(tmp_path):
    _raw_file(str(tmp_path / wal_file_name(1)), 1, [1, 2])
    _raw_file(str(tmp_path / wal_file_name(3)), 3, [])
    rec = recover_wal(str(tmp_path))
    assert rec.torn == [] and rec.removed == [str(tmp_path / wal_file_name(3))]
    assert os.listdir(tmp_path) == [wal_file_name(1)]
    assert rec.next_record_seq == 3
    assert [f.first_seq for f in rec.files] == [1]


def test_a_torn_header_of_the_last_file_is_removed_and_reported(tmp_path):
    _raw_file(str(tmp_path / wal_file_name(1)), 1, [1, 2])
    last = tmp_path / wal_file_name(3)
    last.write_bytes(encode_wal_header(3, 0)[:17])
    rec = recover_wal(str(tmp_path))
    assert rec.torn == [(str(last), 0, 17)] and not last.exists()
    assert rec.next_record_seq == 3


def test_stale_tmp_files_are_removed(tmp_path):
    _raw_file(str(tmp_path / wal_file_name(1)), 1, [1])
    (tmp_path / "x.tmp").write_bytes(b"junk")
    rec = recover_wal(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [wal_file_name(1)]
    assert rec.next_record_seq == 2


def test_an_unknown_format_version_is_refused_even_in_the_last_file(tmp_path):
    path = tmp_path / wal_file_name(1)
    head = WAL_HEADER.pack(b"QWAL", 2, WAL_HEADER_SIZE, 1, 0, 0)
    path.write_bytes(head + struct.pack("<I", checksum(head)))
    with pytest.raises(VersionError, match="version 2"):
        recover_wal(str(tmp_path))
    assert path.exists()


def test_a_header_naming_another_seq_than_the_file_is_corruption(tmp_path):
    _raw_file(str(tmp_path / wal_file_name(1)), 1, [1])
    _raw_file(str(tmp_path / wal_file_name(2)), 7, [2])
    with pytest.raises(CorruptionError, match="differs from the file name"):
        recover_wal(str(tmp_path))


def test_an_empty_directory_recovers_to_seq_one(tmp_path):
    rec = recover_wal(str(tmp_path / "missing"))
    assert (rec.files, rec.scans, rec.torn, rec.next_record_seq) == ([], [], [], 1)


def test_cutting_a_torn_tail_truncates_then_fsyncs_the_file(wal):
    d, paths, _ = wal
    append_garbage(paths[-1], b"\x07" * 50)
    io = FaultyIO()
    recover_wal(d, io=io)
    ops = [(t.op, t.path) for t in io.trace if t.op in ("truncate", "fsync")]
    assert ops == [("truncate", paths[-1]), ("fsync", paths[-1])]
