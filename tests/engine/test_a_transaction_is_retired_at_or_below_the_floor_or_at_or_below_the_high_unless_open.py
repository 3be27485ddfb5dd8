"""The retired-transaction rule (ARCHITECTURE.md §11.1, §10.2): an id is retired iff it is
at or below ``txn_floor``, or at or below ``txn_high`` and not in ``txns_open`` (or a
MANIFEST names it sealed). Joining two records of it, a writer's and a MANIFEST's or
GONE's, never un-retires an id either retires, in any order, however old either is;
and the MANIFEST keeps the record as the three keys it always had.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quiver_spark.control.manifest import Manifest
from quiver_spark.control.txn_retirement import NOTHING_RETIRED, TxnRetirement

IDS = range(0, 40)

retirements = st.builds(
    TxnRetirement,
    st.integers(0, 30),
    st.integers(0, 35),
    st.frozensets(st.integers(0, 38), max_size=8),
)


def test_an_id_is_retired_at_or_below_the_floor_or_at_or_below_the_high_unless_open() -> None:
    r = TxnRetirement(10, 20, frozenset({12, 15}))
    assert [t for t in IDS if not r.retired(t)] == [12, 15, *range(21, 40)]


def test_a_floor_alone_retires_every_id_up_to_it_and_nothing_above() -> None:
    r = TxnRetirement(7)
    assert (r.floor, r.high, r.open) == (7, 7, frozenset())
    assert [t for t in IDS if r.retired(t)] == list(range(0, 8))
    assert not any(NOTHING_RETIRED.retired(t) for t in range(1, 40))


def test_a_record_is_made_whole_open_only_above_the_floor_and_at_or_below_the_high() -> None:
    r = TxnRetirement(10, 5, frozenset({3, 10, 11}))
    assert (r.high, r.open) == (10, frozenset())
    r = TxnRetirement(10, 20, frozenset({3, 10, 11, 20, 21}))
    assert r.open == frozenset({11, 20})


@given(retirements, retirements)
def test_joining_keeps_every_id_either_retires_retired_in_any_order(
    a: TxnRetirement, b: TxnRetirement
) -> None:
    j = a.joined(b)
    for t in IDS:
        if a.retired(t) or b.retired(t):
            assert j.retired(t)
    assert j.floor == max(a.floor, b.floor) and j.high == max(a.high, b.high)
    assert [j.retired(t) for t in IDS] == [b.joined(a).retired(t) for t in IDS]
    assert j.joined(a) == j and j.joined(b) == j and a.joined(a) == a


@given(retirements, retirements)
def test_a_manifest_records_the_join_in_its_three_keys(a: TxnRetirement, b: TxnRetirement) -> None:
    m = Manifest("p").with_retirement(a).with_retirement(b)
    j = a.joined(b)
    assert m.retirement == j
    assert (m.txn_floor, m.txns_open) == (j.floor, tuple(sorted(j.open)))
    assert m.txn_high == (j.high if j.high > j.floor else 0)
    assert Manifest.decode("M", m.encode()).retirement == j
