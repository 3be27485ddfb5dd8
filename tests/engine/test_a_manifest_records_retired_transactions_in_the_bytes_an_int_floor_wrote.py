"""The MANIFEST keys of the transactions a writer retires (``txn_floor``, ``txn_high``,
``txns_open``; ARCHITECTURE.md §11.1, §10.2) are the bytes they were when the floor
travelled the publication path as an ``int`` carrying its high and open ids: a store
written before opens with the same record, and a MANIFEST written now for the same
publications is byte for byte the one written then.

The reference below is that earlier join, kept verbatim as a pure function of the three
keys; it is applied to every chain of writer records and every GONE join the
strategies draw, and the MANIFEST the current code writes must encode to the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from quiver_spark.control.manifest import Manifest
from quiver_spark.control.txn_retirement import TxnRetirement
from quiver_spark.partition.staged import StagedBook

Record = tuple[int, int, tuple[int, ...]]
"""``(txn_floor, txn_high, txns_open)`` as a MANIFEST keeps them."""


def _old_floor(floor: int, high: int, opened: Iterable[int]) -> Record:
    """What the int floor carried: ``high`` never below it, ``open`` in (floor, high]."""
    high = max(floor, high)
    return floor, high, tuple(sorted({t for t in opened if floor < t <= high}))


def _old_retired(rec: Record, txn_id: int) -> bool:
    floor, high, opened = rec
    return txn_id <= floor or (txn_id <= high and txn_id not in opened)


def _old_join(mine: Record, floor: int, high: int, opened: Iterable[int]) -> Record:
    """The earlier ``Manifest._with_retired``: ``mine`` joined with a writer's record."""
    new_floor = max(mine[0], floor)
    m_high = max(mine[1], mine[0])
    theirs = max(high, floor)
    new_high = max(m_high, theirs)
    other: Record = (floor, theirs, tuple(opened))
    wide = mine if m_high >= theirs else other
    still = sorted(t for t in wide[2] if not _old_retired(mine, t) and not _old_retired(other, t))
    if new_high <= new_floor:
        new_high, still = 0, []
    return new_floor, new_high, tuple(t for t in still if t > new_floor)


def _record(m: Manifest) -> Record:
    return m.txn_floor, m.txn_high, m.txns_open


writer_records = st.builds(
    _old_floor,
    st.integers(0, 30),
    st.integers(0, 35),
    st.lists(st.integers(0, 38), max_size=6),
)


def _chain(records: list[Record]) -> tuple[Manifest, Record]:
    m = Manifest("p")
    ref: Record = (0, 0, ())
    for floor, high, opened in records:
        m = m.with_retirement(TxnRetirement(floor, high, frozenset(opened)))
        ref = _old_join(ref, floor, high, opened)
    return m, ref


@settings(max_examples=300)
@given(st.lists(writer_records, min_size=1, max_size=8))
def test_a_chain_of_publications_writes_the_bytes_the_int_floor_wrote(
    records: list[Record],
) -> None:
    m, ref = _chain(records)
    assert _record(m) == ref
    assert (
        m.encode()
        == replace(Manifest("p"), txn_floor=ref[0], txn_high=ref[1], txns_open=ref[2]).encode()
    )
    assert _record(Manifest.decode("M", m.encode())) == ref


@settings(max_examples=300)
@given(
    st.lists(writer_records, min_size=1, max_size=5),
    st.lists(writer_records, min_size=1, max_size=5),
)
def test_joining_a_manifest_with_gone_writes_the_bytes_the_int_floor_wrote(
    ours: list[Record], kept: list[Record]
) -> None:
    a, ref_a = _chain(ours)
    b, ref_b = _chain(kept)
    assert _record(a.with_facts(b)) == _old_join(ref_a, ref_b[0], ref_b[1], ref_b[2])
    assert _record(b.with_facts(a)) == _old_join(ref_b, ref_a[0], ref_a[1], ref_a[2])


@settings(max_examples=300)
@given(
    st.lists(st.integers(1, 30), max_size=5),
    st.lists(st.integers(1, 30), max_size=3),
    st.integers(0, 30),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_a_writers_record_is_the_one_the_int_floor_carried(
    writing: list[int], foreign: list[int], top: int, ceiling: int | None
) -> None:
    book = StagedBook.__new__(StagedBook)
    book.foreign = {t: (0.0, 0.0) for t in foreign}
    book.held = {}
    book.ceiling = ceiling
    book._list = lambda held: False  # type: ignore[method-assign]
    got = book.floor(writing, (), top)
    open_ids = [*writing, *foreign]
    ref = _old_floor(min(open_ids) - 1 if open_ids else top, top, open_ids)
    if ceiling is not None and ref[1] > ceiling:
        ref = _old_floor(min(ref[0], ceiling), 0, ())
    assert (got.floor, got.high, tuple(sorted(got.open))) == ref
