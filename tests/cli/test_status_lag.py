"""A subscriber's lag in ``quiver status`` (the retained-segment index's bisection at
its mark, over the segments' bytes on disk) equals a walk of every segment: segments
above the mark and not in its gaps, their bytes on disk, the oldest ingestion time
among them and their rows."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from quiver_spark.cli.status import lag_index


@dataclasses.dataclass(frozen=True)
class Meta:
    seq: int
    size_bytes: int
    min_ingestion_ns: int
    rows: int = 0
    partition: str = "p-0"

    @property
    def max_ingestion_ns(self) -> int:
        return self.min_ingestion_ns


@settings(max_examples=400, deadline=None)
@given(
    seqs=st.sets(st.integers(1, 40), max_size=25),
    hwm=st.integers(0, 42),
    gaps=st.sets(st.integers(1, 45), max_size=6),
    data=st.data(),
)
def test_lag_by_bisection_is_the_walk_of_every_segment(
    seqs: set[int], hwm: int, gaps: set[int], data: st.DataObject
) -> None:
    metas = [
        Meta(
            s,
            data.draw(st.integers(1, 500)),
            data.draw(st.integers(0, 10**6)),
            data.draw(st.integers(0, 10**4)),
        )
        for s in sorted(seqs, reverse=True)  # any order in
    ]
    sizes = {m.seq: m.size_bytes + 40 for m in metas if m.seq % 3}  # on disk, some unknown
    gaps = {g for g in gaps if g > hwm}
    behind = [m for m in metas if m.seq > hwm and m.seq not in gaps]
    want = (
        len(behind),
        sum(sizes.get(m.seq, m.size_bytes) for m in behind),
        min((m.min_ingestion_ns for m in behind), default=None),
        sum(m.rows for m in behind),
    )
    index = lag_index({"p-0": metas}, {"p-0": sizes})  # type: ignore[dict-item]
    assert index.lag("p-0", hwm, gaps) == want
