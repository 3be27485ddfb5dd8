"""A small set of inclusive integer ranges, used for WAL record-seq coverage."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from .errors import InvalidArgumentError


class RangeSet:
    """Sorted, disjoint, non-adjacent inclusive ranges ``[lo, hi]``."""

    __slots__ = ("_his", "_los")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._los: list[int] = []
        self._his: list[int] = []
        for lo, hi in ranges:
            self.add(lo, hi)

    def add(self, lo: int, hi: int | None = None) -> None:
        hi = lo if hi is None else hi
        if hi < lo:
            raise InvalidArgumentError("range", (lo, hi), "lo <= hi", f"empty range [{lo}, {hi}]")
        # first range whose hi >= lo - 1 (could merge), last range whose lo <= hi + 1
        i = bisect.bisect_left(self._his, lo - 1)
        j = bisect.bisect_right(self._los, hi + 1)
        if i < j:
            lo = min(lo, self._los[i])
            hi = max(hi, self._his[j - 1])
        self._los[i:j] = [lo]
        self._his[i:j] = [hi]

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._los, x) - 1
        return i >= 0 and self._his[i] >= x

    def covers(self, lo: int, hi: int) -> bool:
        """True when every integer in ``[lo, hi]`` is in the set."""
        i = bisect.bisect_right(self._los, lo) - 1
        return i >= 0 and self._his[i] >= hi

    def drop_below(self, floor: int) -> None:
        """Forget everything below ``floor`` (it can no longer be asked about)."""
        while self._los and self._his[0] < floor:
            del self._los[0], self._his[0]
        if self._los and self._los[0] < floor:
            self._los[0] = floor

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._los, self._his, strict=True))

    def __len__(self) -> int:
        return len(self._los)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)!r})"

    def to_list(self) -> list[list[int]]:
        return [[lo, hi] for lo, hi in self]


def ranges_of(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Compress sorted-or-not integers into inclusive ranges."""
    rs = RangeSet()
    for s in seqs:
        rs.add(s)
    return list(rs)
