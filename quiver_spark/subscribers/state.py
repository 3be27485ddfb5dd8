"""In-memory subscriber state rebuilt from checkpoint + ack-log facts.

Every fact in the log commutes with every other (ARCHITECTURE.md §13.4): outcomes only
grow a done-set, a start position and a deletion only raise a floor, a deregistration
only removes an id that is never reused. So applying facts in any grouping or order
gives the same state, which is what makes the vectorised replay, the incremental
``refresh`` and the checkpoint agree exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError
from .log import NS_PARTITION, NS_SUBSCRIBER, Facts


@dataclass
class PartState:
    """One subscriber's progress in one partition (or a partition's deleted set)."""

    hwm: int = 0
    gaps: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)

    def is_done(self, seq: int) -> bool:
        return seq <= self.hwm or seq in self.gaps

    def raise_to(self, floor: int) -> None:
        if floor > self.hwm:
            self.hwm = floor
            self._settle()

    def add_runs(self, runs: Iterable[tuple[int, int]]) -> None:
        """Mark ``(first, count)`` runs done; runs sorted by ``first`` are fastest."""
        h, gaps = self.hwm, self.gaps
        for first, count in runs:
            last = first + count - 1
            if last <= h:
                continue
            if first <= h + 1:
                h = last
            elif count == 1:
                gaps.add(first)
            else:
                gaps.update(range(first, last + 1))
        self.hwm = h
        self._settle()

    def add_seqs(self, seqs: list[int]) -> None:
        """Mark single ``seqs`` (any order) done; a contiguous batch costs one set build."""
        if not seqs:
            return
        h = self.hwm
        got = set(seqs)
        lo, hi = min(got), max(got)
        if lo <= h + 1 and hi - lo + 1 == len(got):
            if hi > h:
                self.hwm = hi
            self._settle()
            return
        got.update(self.gaps)
        while h + 1 in got:
            h += 1
        self.hwm = h
        self.gaps = {g for g in got if g > h}

    def _settle(self) -> None:
        h, gaps = self.hwm, self.gaps
        if not gaps:
            return
        while h + 1 in gaps:
            h += 1
        self.hwm = h
        if min(gaps) <= h:
            self.gaps = {g for g in gaps if g > h}

    def copy(self) -> PartState:
        return PartState(self.hwm, set(self.gaps), set(self.nacked))


class RegistryState:
    """Subscribers, partitions, progress and deletions, keyed by numeric ids."""

    def __init__(self) -> None:
        self.next_sub_id = 1
        self.next_part_id = 1
        self.subs: dict[int, str] = {}
        self.by_name: dict[str, int] = {}
        self.dead: set[int] = set()
        self.parts: dict[int, str] = {}
        self.part_ids: dict[str, int] = {}
        self.progress: dict[int, dict[int, PartState]] = {}
        self.deleted: dict[int, PartState] = {}
        self.claims: dict[int, tuple[int, int, int]] = {}
        """Subscriber -> (lease epoch, log position, token) of the claim that stands
        (§13.7): the highest epoch, then the latest in the log."""
        self.orphans = 0
        self._chunks: dict[tuple[int, int], dict[int, bytes]] = {}

    # -- queries -------------------------------------------------------------------
    def part(self, sid: int, pid: int | None) -> PartState | None:
        """``sid``'s state in ``pid`` as stored, or None if it never moved there."""
        if pid is None:
            return None
        return self.progress.get(sid, {}).get(pid)

    def marks(self, sid: int, pid: int | None) -> PartState | None:
        """What counts as done for ``sid`` in ``pid``: its own state, else the
        partition's deleted set (shared, not a copy: read only), else None."""
        ps = self.part(sid, pid)
        if ps is not None:
            return ps
        return self.deleted.get(pid) if pid is not None else None

    def is_done(self, sid: int, pid: int | None, seq: int) -> bool:
        ps = self.marks(sid, pid)
        return ps is not None and ps.is_done(seq)

    def view(self, sid: int, pid: int | None) -> PartState:
        ps = self.part(sid, pid)
        if ps is not None:
            return ps
        dl = self.deleted.get(pid) if pid is not None else None
        return dl.copy() if dl is not None else PartState()

    def _ps(self, sid: int, pid: int) -> PartState:
        parts = self.progress.setdefault(sid, {})
        ps = parts.get(pid)
        if ps is None:
            dl = self.deleted.get(pid)
            ps = parts[pid] = PartState(dl.hwm, set(dl.gaps)) if dl else PartState()
        return ps

    # -- applying facts ------------------------------------------------------------
    def apply(self, facts: Facts) -> None:
        """Apply decoded log records (any batch of them, in any order)."""
        for ns, ident, idx, total, chunk in facts.names:
            self._name_chunk(ns, ident, idx, total, chunk)
        for sid, pid, hwm in facts.starts:
            if sid in self.subs:
                self._ps(sid, pid).raise_to(hwm)
        for sid in facts.deregs:
            self._remove(sid)
        by_part: dict[int, list[tuple[int, int]]] = {}
        for pid, first, count in facts.deleted:
            by_part.setdefault(pid, []).append((first, count))
            self.next_part_id = max(self.next_part_id, pid + 1)
        for pid, runs in by_part.items():
            runs.sort()
            self.deleted.setdefault(pid, PartState()).add_runs(runs)
            for sid in self.subs:
                self._ps(sid, pid).add_runs(runs)
        for sid, token, epoch in facts.claims:
            if sid in self.subs:  # the highest epoch, then the latest, wins: a max commutes
                self.claims[sid] = max(
                    self.claims.get(sid, (0, 0, 0)), (epoch, facts.position, token)
                )
        self._apply_done(facts)
        for sid, pid, first, count in facts.nacks:
            if sid in self.subs:
                ps = self._ps(sid, pid)
                ps.nacked.update(s for s in range(first, first + count) if not ps.is_done(s))

    def _apply_done(self, f: Facts) -> None:
        for grp in f.done:
            if grp.sub not in self.subs:
                self.orphans += len(grp.firsts)
                continue
            ps = self._ps(grp.sub, grp.part)
            if grp.counts is None:
                ps.add_seqs(grp.firsts)
            else:
                ps.add_runs(zip(grp.firsts, grp.counts, strict=True))

    def _name_chunk(self, ns: int, ident: int, idx: int, total: int, chunk: bytes) -> None:
        if ns == NS_SUBSCRIBER:
            self.next_sub_id = max(self.next_sub_id, ident + 1)
            if ident in self.subs or ident in self.dead:
                return
        elif ns == NS_PARTITION:
            self.next_part_id = max(self.next_part_id, ident + 1)
            if ident in self.parts:
                return
        else:
            return
        got = self._chunks.setdefault((ns, ident), {})
        got[idx] = chunk
        if len(got) < total:
            return
        name = b"".join(got[i] for i in range(total)).rstrip(b"\0").decode("ascii")
        del self._chunks[(ns, ident)]
        if ns == NS_SUBSCRIBER:
            self.subs[ident] = name
            self.by_name[name] = ident
        else:
            self.parts[ident] = name
            self.part_ids[name] = ident

    def claimed_by(self, sid: int) -> int | None:
        """The token of ``sid``'s live consumer as its latest claim names it, if any."""
        held = self.claims.get(sid)
        return held[2] if held is not None else None

    def _remove(self, sid: int) -> None:
        self.claims.pop(sid, None)
        self.dead.add(sid)
        self.next_sub_id = max(self.next_sub_id, sid + 1)
        name = self.subs.pop(sid, None)
        if name is not None and self.by_name.get(name) == sid:
            del self.by_name[name]
        self.progress.pop(sid, None)
        self._chunks.pop((NS_SUBSCRIBER, sid), None)

    # -- checkpoint body (ARCHITECTURE.md §13.5) --------------------------------------
    def to_body(self, log_gen: int, records_total: int) -> dict[str, Any]:
        def enc(ps: PartState) -> list[Any]:
            return [ps.hwm, sorted(ps.gaps), sorted(s for s in ps.nacked if not ps.is_done(s))]

        return {
            "log_gen": log_gen,
            "records_total": records_total,
            "next_sub_id": self.next_sub_id,
            "next_part_id": self.next_part_id,
            "subs": dict(self.subs),
            "dead": sorted(self.dead),
            "parts": dict(self.parts),
            "progress": {
                sid: {pid: enc(ps) for pid, ps in parts.items()}
                for sid, parts in self.progress.items()
            },
            "deleted": {pid: enc(ps)[:2] for pid, ps in self.deleted.items()},
            **({"claims": {sid: list(c) for sid, c in self.claims.items()}} if self.claims else {}),
        }

    @classmethod
    def from_body(cls, path: str, body: dict[str, Any]) -> RegistryState:
        st = cls()
        try:
            st.next_sub_id = int(body["next_sub_id"])
            st.next_part_id = int(body["next_part_id"])
            st.subs = {int(k): str(v) for k, v in body["subs"].items()}
            st.by_name = {v: k for k, v in st.subs.items()}
            st.dead = {int(x) for x in body["dead"]}
            st.parts = {int(k): str(v) for k, v in body["parts"].items()}
            st.part_ids = {v: k for k, v in st.parts.items()}
            for sid, parts in body["progress"].items():
                st.progress[int(sid)] = {
                    int(pid): PartState(int(v[0]), set(v[1]), set(v[2])) for pid, v in parts.items()
                }
            for pid, v in body["deleted"].items():
                st.deleted[int(pid)] = PartState(int(v[0]), set(v[1]))
            for sid, c in dict(body.get("claims", {})).items():
                st.claims[int(sid)] = (int(c[0]), int(c[1]), int(c[2]))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise CorruptionError(path, 16, f"checkpoint body malformed: {e!r}") from e
        return st

    def digest(self) -> dict[str, Any]:
        """Name-keyed canonical view, for equality checks across replays."""
        subs: dict[str, Any] = {}
        pids = set(self.parts) | set(self.deleted)
        for sid, name in self.subs.items():
            pids_of = pids | set(self.progress.get(sid, {}))
            entry = {}
            for pid in sorted(pids_of):
                ps = self.view(sid, pid)
                val = (
                    ps.hwm,
                    tuple(sorted(ps.gaps)),
                    tuple(sorted(s for s in ps.nacked if not ps.is_done(s))),
                )
                if val != (0, (), ()):
                    entry[self.parts.get(pid, f"#{pid}")] = val
            subs[name] = entry
        deleted = {
            self.parts.get(pid, f"#{pid}"): (ps.hwm, tuple(sorted(ps.gaps)))
            for pid, ps in self.deleted.items()
        }
        return {"subscribers": subs, "deleted": deleted}
