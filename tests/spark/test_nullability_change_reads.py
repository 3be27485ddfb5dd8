"""A column made nullable later reads back with its nulls.

The store accepts a nullability change (a segment per schema); the source reads every
column as nullable, so later segments' nulls reach Spark, packed in one task or not.
"""

from __future__ import annotations

import pyarrow as pa

from quiver_spark import QuiverStore, StoreConfig


def test_a_column_made_nullable_later_reads_back_with_its_nulls(spark, tmp_path):
    root = str(tmp_path / "store")
    strict = pa.schema([pa.field("x", pa.int64(), nullable=False)])
    loose = pa.schema([pa.field("x", pa.int64(), nullable=True)])
    with QuiverStore.open(root, StoreConfig(), partition="p-0", background=False) as st:
        st.append(pa.record_batch([pa.array([1, 2])], schema=strict))
        st.flush()
        st.finalize()
        st.append(pa.record_batch([pa.array([None, 4])], schema=loose))  # accepted
        st.flush()
        st.finalize()
    df = spark.read.format("quiver").load(root)
    assert sorted(r.x for r in df.collect() if r.x is not None) == [1, 2, 4]
    assert df.filter("x is null").count() == 1
