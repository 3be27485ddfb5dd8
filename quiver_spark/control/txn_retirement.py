"""Which of a partition's transactions are retired: sealed or decided against, so that a
staged object of theirs is garbage, never sealed (again) (ARCHITECTURE.md §11.1, §10.2).

A partition's writer on an object root records with each publication how far its
transactions are retired, as a :class:`TxnRetirement`: every id at or below ``floor``
(held down by the lowest transaction not sealed yet), and every id at or below
``high`` that is not ``open``. The MANIFEST keeps it as ``txn_floor``, ``txn_high``
(absent while not above the floor) and ``txns_open`` (absent while empty), GONE a
copy; a MANIFEST's entries and ``txns_gone`` name sealed transactions besides
(:meth:`~quiver_spark.control.manifest.Manifest.seals`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TxnRetirement:
    """The transactions a writer retires (§10.2): an id is retired iff it is at or below
    :attr:`floor`, or at or below :attr:`high` and not in :attr:`open`. Made whole when
    built: :attr:`high` is never below :attr:`floor` and :attr:`open` holds only ids
    above the floor, at or below the high (``TxnRetirement(f)`` retires every id up to
    ``f`` and nothing else)."""

    floor: int = 0
    """Every transaction id at or below it is retired."""
    high: int = 0
    """Every transaction id at or below it that is not in :attr:`open` is retired."""
    open: frozenset[int] = frozenset()
    """The ids above :attr:`floor`, at or below :attr:`high`, not sealed yet."""

    def __post_init__(self) -> None:
        high = max(self.floor, self.high)
        opened = frozenset(t for t in self.open if self.floor < t <= high)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "open", opened)

    def retired(self, txn_id: int) -> bool:
        """Whether transaction ``txn_id`` is sealed or decided against."""
        return txn_id <= self.floor or (txn_id <= self.high and txn_id not in self.open)

    def joined(self, other: TxnRetirement) -> TxnRetirement:
        """The transactions this or ``other`` retires: a transaction either retires
        stays retired, so the floor and the high are the larger and an id is open only
        if the one reaching highest holds it open and neither retires it. Safe in any
        order and with a copy of any age (a MANIFEST's, GONE's, a writer's)."""
        wide = self if self.high >= other.high else other
        return TxnRetirement(
            max(self.floor, other.floor),
            wide.high,
            frozenset(t for t in wide.open if not self.retired(t) and not other.retired(t)),
        )


NOTHING_RETIRED = TxnRetirement()
"""What a publication that retires no transaction records (a sealer's, a POSIX root's):
joined with a MANIFEST's, it leaves it as it is."""
