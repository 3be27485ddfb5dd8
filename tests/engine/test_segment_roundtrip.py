"""Segments round-trip data exactly: types, nulls, coalescing, dictionaries, event time."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest

from quiver_spark.errors import ConfigError, SchemaMismatchError
from quiver_spark.segment import SegmentLocation, schema_fingerprint
from tests.engine.segment_helpers import SCHEMA, int_batches, mixed_batch


@pytest.fixture
def loc(tmp_path) -> SegmentLocation:
    return SegmentLocation(str(tmp_path / "segments"))


def _write(loc: SegmentLocation, batches, seq: int = 1, **kw):
    return loc.write(
        "p0",
        seq,
        batches,
        min_ingestion_ns=10,
        max_ingestion_ns=20,
        wal_ranges=[(1, len(batches))],
        **kw,
    )


def test_many_small_batches_round_trip_coalesced_with_every_type_and_nulls(loc):
    batches = [mixed_batch(i * 137, 137) for i in range(300)]  # 41,100 rows
    meta = _write(loc, batches, target_batch_rows=10_000)
    # 137-row batches gathered until >= 10,000 rows: 73 per batch -> 10,001 rows
    assert meta.rows == 41_100
    assert meta.batches == 5
    with loc.open(meta) as r:
        sizes = [b.num_rows for b in r.batches()]
        table = r.read_all()
    assert sizes == [10_001, 10_001, 10_001, 10_001, 1_096]
    assert table.schema == SCHEMA
    assert table.equals(pa.Table.from_batches(batches))
    assert table.column("name").null_count == sum(1 for i in range(41_100) if i % 7 == 0)


def test_a_batch_larger_than_the_target_is_kept_whole_and_not_merged(loc):
    batches = int_batches(1, 25_000) + int_batches(3, 10, start=25_000)
    meta = _write(loc, batches, target_batch_rows=10_000)
    with loc.open(meta) as r:
        assert [b.num_rows for b in r.batches()] == [25_000, 30]
        assert r.read_all().column("v").to_pylist() == list(range(25_030))


def test_empty_batches_are_dropped_but_the_schema_is_kept(loc):
    empty = pa.record_batch({"v": pa.array([], pa.int64())})
    meta = _write(loc, [empty, empty], target_batch_rows=10)
    assert (meta.rows, meta.batches) == (0, 0)
    with loc.open(meta) as r:
        assert r.schema == empty.schema
        assert r.read_all().num_rows == 0


def test_dictionary_columns_with_different_dictionaries_per_batch_survive(loc):
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    batches = []
    for i in range(6):
        vals = [words[(i + j) % (i % 4 + 2)] for j in range(50)]
        nested = pa.StructArray.from_arrays([pa.array(vals).dictionary_encode()], ["w"])
        batches.append(pa.record_batch({"d": pa.array(vals).dictionary_encode(), "s": nested}))
    assert not batches[0].column(0).dictionary.equals(batches[3].column(0).dictionary)
    # one batch per file batch: every file batch must share a unified dictionary
    meta = _write(loc, batches, target_batch_rows=50)
    assert meta.batches == 6
    with loc.open(meta) as r:
        got = r.read_all()
        dicts = [r.read_batch(i).column(0).dictionary for i in range(r.num_batches)]
    expected = pa.Table.from_batches(batches)
    assert got.column("d").to_pylist() == expected.column("d").to_pylist()
    assert got.column("s").to_pylist() == expected.column("s").to_pylist()
    assert all(d.equals(dicts[0]) for d in dicts)
    assert pa.types.is_dictionary(got.schema.field("d").type)


def test_event_time_min_max_for_a_timestamp_column(loc):
    meta = _write(loc, [mixed_batch(0, 100), mixed_batch(100, 100)], event_time_column="ts")
    base = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
    # ts = base + id seconds, null when id % 11 == 0 (ids 0 and 198 are null)
    assert meta.event_time_column == "ts"
    assert meta.min_event_time == base + 1 * 1_000_000
    assert meta.max_event_time == base + 199 * 1_000_000


def test_event_time_min_max_for_an_int_column_ignores_nulls(loc):
    b = pa.record_batch({"t": pa.array([5, None, -3, 42, None], pa.int32())})
    meta = _write(loc, [b], event_time_column="t")
    assert (meta.min_event_time, meta.max_event_time) == (-3, 42)


def test_event_time_is_none_without_a_column_or_when_all_null(loc):
    assert _write(loc, int_batches(2, 10)).min_event_time is None
    nulls = pa.record_batch({"t": pa.array([None, None], pa.timestamp("ms"))})
    meta = _write(loc, [nulls], seq=2, event_time_column="t")
    assert (meta.min_event_time, meta.max_event_time) == (None, None)


def test_an_unusable_event_time_column_is_refused_naming_the_option(loc):
    with pytest.raises(ConfigError, match=r"segment\.event_time_column"):
        _write(loc, int_batches(1, 5), event_time_column="nope")
    with pytest.raises(ConfigError, match=r"segment\.event_time_column"):
        _write(loc, [mixed_batch(0, 5)], event_time_column="name")
    assert loc.list("p0") == []


def test_batches_with_different_schemas_are_refused(loc):
    other = pa.record_batch({"w": pa.array([1.0])})
    with pytest.raises(SchemaMismatchError):
        _write(loc, [*int_batches(1, 5), other])


def test_meta_records_what_was_written(loc):
    batches = int_batches(4, 25)
    meta = loc.write(
        "p0", 7, batches, min_ingestion_ns=100, max_ingestion_ns=200, wal_ranges=[(3, 5), (9, 9)]
    )
    assert (meta.partition, meta.seq, meta.rows) == ("p0", 7, 100)
    assert (meta.min_ingestion_ns, meta.max_ingestion_ns) == (100, 200)
    assert meta.wal_ranges == ((3, 5), (9, 9))
    assert meta.schema_fingerprint == schema_fingerprint(batches[0].schema)
    arrow = loc.data_path("p0", 7)
    assert arrow.endswith("/p0/00000000000000000007.arrow")
    assert meta.size_bytes == os.path.getsize(arrow)
    assert loc.read_meta("p0", 7) == meta
    assert loc.list("p0") == [meta]


def test_schema_fingerprint_ignores_schema_metadata_but_not_types():
    s = pa.schema([("a", pa.int64())])
    assert schema_fingerprint(s) == schema_fingerprint(s.with_metadata({"pandas": "x"}))
    assert schema_fingerprint(s) != schema_fingerprint(pa.schema([("a", pa.int32())]))


def test_zstd_compressed_segments_round_trip(loc):
    batches = int_batches(10, 1000)
    meta = _write(loc, batches, compression="zstd")
    plain = _write(loc, batches, seq=2)
    assert meta.size_bytes < plain.size_bytes
    with loc.open(meta) as r:
        assert r.read_all().equals(pa.Table.from_batches(batches))


def test_batches_stay_valid_after_the_reader_is_closed(loc):
    meta = _write(loc, int_batches(3, 100), target_batch_rows=100)
    with loc.open(meta) as r:
        first = r.read_batch(0)
    assert first.column(0).to_pylist() == list(range(100))
    with pytest.raises(ValueError, match="closed"):
        r.read_batch(0)


def test_reader_slices_batches_by_index(loc):
    meta = _write(loc, int_batches(5, 10), target_batch_rows=10)
    with loc.open(meta) as r:
        assert [b.column(0)[0].as_py() for b in r.batches(1, 3)] == [10, 20]
        assert r.read_batch(4).column(0)[0].as_py() == 40
        with pytest.raises(IndexError):
            r.read_batch(5)


def test_partitions_and_total_bytes_cover_published_segments_only(loc, tmp_path):
    m1 = _write(loc, int_batches(2, 10))
    m2 = loc.write(
        "p1", 1, int_batches(2, 10), min_ingestion_ns=0, max_ingestion_ns=0, wal_ranges=[(1, 1)]
    )
    (tmp_path / "segments" / "p1" / "00000000000000000002.arrow").write_bytes(b"orphan")
    (tmp_path / "segments" / "not a partition!").mkdir()
    assert loc.partitions() == ["p0", "p1"]
    meta_size = len(m1.encode())
    assert loc.total_bytes("p0") == m1.size_bytes + meta_size
    assert loc.total_bytes() == m1.size_bytes + m2.size_bytes + meta_size + len(m2.encode())
