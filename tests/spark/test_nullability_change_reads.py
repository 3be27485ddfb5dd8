"""A column written first as non-nullable and later as nullable (the store accepts it:
"nullability ignored", a segment per schema) cannot be read back: the source's Spark
schema comes from the store's first schema (``not null``), ``conform`` stamps that
schema onto the later segment's batches with their nulls, and Spark fails the task
("Value at index is null"). Packing both segments into one read task does not help;
the same happens with one task per segment (present before 6e72b4b too).
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
