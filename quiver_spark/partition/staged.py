"""A writer's bookkeeping of its partition's staged transactions on an object root.

Each task of a writer on an object root stages its transaction as an object under
``txns/`` before the driver's commit (ARCHITECTURE.md §10.2). The partition's writer
keeps three things about them, in a :class:`StagedBook`:

- ``undropped``: staged objects the MANIFEST names whose delete failed, removed with
  the next publication;
- ``foreign``: staged transactions neither its WAL nor the MANIFEST holds (another
  incarnation's, whose disk was lost), each with when to look at it again; the writer
  seals the committed ones itself (:func:`~.staged_seal.seal_one`), since it holds the
  lease and no observer does;
- ``ceiling``: the highest ``txn_floor`` it may record until a listing of ``txns/``
  made after its open was taken into account (the open's listing may lag);
- ``held``: pending transactions of its WAL whose id a damaged staged object holds,
  kept unresolved (the object may be another writer's, whose rows the commit record
  names) and looked at again until it is repaired or removed; STATE keeps their ids.

The book decides; the writer, which holds the lock, the seq and the lease, acts.
:func:`staged_schema` gives a transaction's records the one schema its staged object
has, so the segment the writer seals holds the same rows a sealer would.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

import pyarrow as pa

from ..control.manifest_store import ManifestStore
from ..control.txn_retirement import TxnRetirement
from ..objects import ObjectStore
from ..segment import SegmentLocation
from ..staging import drop_staged, one_schema, staged_ids
from .model import RESOLVE_CAP_S
from .staged_seal import Outcome, Sealed

log = logging.getLogger(__name__)


def staged_schema(
    pid: str, txn_id: int, records: list[tuple[int, int, pa.RecordBatch]]
) -> list[tuple[int, int, pa.RecordBatch]]:
    """A transaction's records under the one schema its staged object has
    (:func:`~quiver_spark.staging.one_schema`: the same columns, taken by name or, for
    repeated names, by position, nullable where any batch is); as they are when the
    store took them as different schemas (a schema change: they are split)."""
    try:
        batches = one_schema(pid, txn_id, [b for _, _, b in records])
    except ValueError:
        return records
    return [(seq, ns, b) for (seq, ns, _), b in zip(records, batches, strict=True)]


def staged_objects(segments: SegmentLocation) -> ObjectStore:
    """The bucket a partition's staged transactions are in (§10.2): an object root's,
    whose segments publish through a MANIFEST. Only an object root's writer stages, so
    only it finds staged transactions to ask this for."""
    assert isinstance(segments.manifests, ManifestStore)  # an object root's segments
    return segments.manifests.objects


class StagedBook:
    """What the writer of ``pid`` knows of its partition's staged transactions."""

    def __init__(self, segments: SegmentLocation, pid: str) -> None:
        self.segments = segments
        self.pid = pid
        self.undropped: set[int] = set()
        """Staged transactions the MANIFEST names whose delete failed."""
        self.foreign: dict[int, tuple[float, float]] = {}
        """Another incarnation's staged transactions -> (next look, interval)."""
        self.ceiling: int | None = None
        """The highest floor to record until a later listing (None: no limit)."""
        self.held: dict[int, tuple[float, float]] = {}
        """Pending transactions held on a damaged staged object -> (next look, interval)."""

    def drop(self, txns: tuple[int, ...]) -> None:
        """The staged objects of transactions now in the MANIFEST are garbage (§10.2);
        removed best effort: a failed delete is retried with the writer's next
        publication (and the next observer pass removes leftovers). Only those the
        MANIFEST at hand names (none where it does not publish: nothing is staged)."""
        # never the staged object of a transaction the MANIFEST does not name: its rows
        # would be nowhere else once this writer's WAL is gone
        wanted = sorted({*txns, *self.undropped})
        named = tuple(t for t in wanted if self.segments.seals_txn(self.pid, t))
        if not named:
            return
        try:
            drop_staged(self._objects(), self.pid, named)
        except OSError as e:
            self.undropped.update(named)
            log.warning("quiver.staged.drop_failed partition=%s txns=%s: %s", self.pid, named, e)
        else:
            self.undropped.difference_update(named)

    def adopt(self, unsealed: Iterable[int], held: Collection[int]) -> None:
        """At recovery: the listed staged transactions the MANIFEST does not name and
        the writer does not hold are foreign; one looked at before keeps its schedule,
        a new one is looked at at once."""
        self.foreign = {t: self.foreign.get(t, (0.0, 0.0)) for t in unsealed if t not in held}

    def hold(self, txn_ids: Iterable[int], now: float) -> None:
        """At recovery: the pending transactions whose staged object is damaged (§10.2);
        one held before keeps its schedule, a new one is looked at again after
        :data:`RESOLVE_CAP_S`. Any other is no longer held."""
        self.held = {t: self.held.get(t, (now + RESOLVE_CAP_S, RESOLVE_CAP_S)) for t in txn_ids}

    def held_due(self, now: float) -> list[int]:
        """The held transactions to look at again now, in order."""
        return [t for t in sorted(self.held) if now >= self.held[t][0]]

    def still_damaged(self, txn_id: int, now: float) -> None:
        """Held ``txn_id``'s object is still damaged: looked at again after
        :data:`RESOLVE_CAP_S` (one GET each time)."""
        self.held[txn_id] = (now + RESOLVE_CAP_S, RESOLVE_CAP_S)

    def note(self, txn_id: int) -> None:
        """Another incarnation's staged object met under ``txn_id``: foreign."""
        self.foreign.setdefault(txn_id, (0.0, 0.0))

    def release(self, txn_id: int) -> None:
        """``txn_id`` is held no longer: its damaged staged object was repaired or
        removed, or the writer holds no such pending transaction any more."""
        self.held.pop(txn_id, None)

    def cap(self, ceiling: int | None) -> None:
        """At recovery: the highest floor to record until a listing of ``txns/`` made
        after it is taken into account (None: no limit)."""
        self.ceiling = ceiling

    def floor(
        self, writing: Collection[int], unpublished: Iterable[int], top: int
    ) -> TxnRetirement:
        """The transactions of the partition sealed or decided against (§10.2): every
        id up to the floor, below the lowest the writer has not sealed yet
        (``writing``: pending, committed in the open segment or being admitted; or a
        foreign one), else ``top`` (its highest id); up to ``top``, every id but those
        not sealed yet (open). Neither floor nor high above :attr:`ceiling` until a
        listing of ``txns/`` noted every staged object it shows (a floor over an object
        the open's listing hid would make it garbage): the floor capped, nothing above."""
        retirement = self._floor(writing, top)
        if self.ceiling is not None and retirement.high > self.ceiling:
            if not self._list({*writing, *unpublished}):
                return TxnRetirement(min(retirement.floor, self.ceiling))
            self.ceiling = None
            retirement = self._floor(writing, top)
        return retirement

    def _floor(self, writing: Collection[int], top: int) -> TxnRetirement:
        open_ids = frozenset([*writing, *self.foreign])
        return TxnRetirement(min(open_ids) - 1 if open_ids else top, top, open_ids)

    def _list(self, held: set[int]) -> bool:
        """List ``txns/`` (one LIST) and note as foreign every staged object neither
        ``held`` nor named by the MANIFEST; False when the listing failed (the floor
        then stays where it was)."""
        try:
            listed = staged_ids(self._objects(), self.pid)
        except OSError as e:
            log.warning("quiver.staged.list_failed partition=%s: %s", self.pid, e)
            return False
        held = held | set(self.foreign)
        for t in listed:
            if t not in held and not self.segments.seals_txn(self.pid, t):
                self.foreign[t] = (0.0, 0.0)
        return True

    def due(self, now: float) -> list[int]:
        """The foreign transactions to look at now, in order."""
        return [t for t in sorted(self.foreign) if now >= self.foreign[t][0]]

    def looked(self, txn_id: int, done: Sealed, now: float) -> bool:
        """Book what sealing foreign ``txn_id`` did; True when its object is garbage.
        An undecided one is looked at again after 1 s, 2, 4... at most every
        :data:`RESOLVE_CAP_S`; a damaged one every :data:`RESOLVE_CAP_S` (left for
        fsck: its rows may be committed and nowhere else; never floored) until
        someone repairs or removes it; a decided or absent one is forgotten."""
        if done.outcome is Outcome.UNDECIDED:
            interval = min(RESOLVE_CAP_S, max(1.0, 2 * self.foreign[txn_id][1]))
            self.foreign[txn_id] = (now + interval, interval)
            return False
        if done.outcome is Outcome.DAMAGED:
            self.foreign[txn_id] = (now + RESOLVE_CAP_S, RESOLVE_CAP_S)
            return False
        del self.foreign[txn_id]
        return done.garbage

    def drop_garbage(self, garbage: list[int]) -> None:
        """Remove the staged objects of foreign transactions sealed or decided without
        them; a failed delete is retried with the next publication."""
        if not garbage:
            return
        try:
            drop_staged(self._objects(), self.pid, garbage)
        except OSError as e:
            self.undropped.update(garbage)
            log.warning("quiver.staged.drop_failed partition=%s: %s", self.pid, e)

    def _objects(self) -> ObjectStore:
        return staged_objects(self.segments)
