"""What retention reclaimed before a subscriber was registered, said once at its
registration (``quiver.subscriber.registered_late``).

Retention deletes a segment once every registered subscriber is done with it (§8.7),
so a subscriber registered later never sees what went before it: without a word it
would read 0 rows where another got thousands. The ack log's DELETED facts (§8.4) are
the count: only a retention pass writes them, for the segments it deletes, so each
partition's deleted set holds exactly the seqs reclaimed there (a seq never published,
moved aside or removed by hand is not in it). The rows and ingestion times of a
deleted segment are recorded nowhere once its ``.meta`` and MANIFEST entry are gone,
so the line says so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .state import RegistryState

EVENT = "quiver.subscriber.registered_late"


@dataclass(frozen=True)
class PartReclaimed:
    """One partition's segments reclaimed before the registration, and where the new
    subscriber starts there."""

    partition: str
    segments: int
    highest: int
    """The highest seq reclaimed."""
    starts_at: int
    """The first seq the subscriber has not done (acked, dropped or deleted)."""


@dataclass(frozen=True)
class Reclaimed:
    """Segments reclaimed before ``subscriber`` was registered, per partition."""

    subscriber: str
    parts: list[PartReclaimed] = field(default_factory=list)
    at_least: bool = False
    """The ack log was opened with salvage and skipped records: more may be gone."""

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.parts)

    def line(self) -> str:
        """The one line a registration says (log and CLI)."""
        n = self.segments
        count = f"{'at least ' if self.at_least else ''}{n} segment{'s' if n != 1 else ''}"
        where = "; ".join(f"{p.partition}: {p.segments} up to seq {p.highest}" for p in self.parts)
        starts = ", ".join(f"{p.partition} seq {p.starts_at}" for p in self.parts)
        return (
            f"{count} ({where}; rows and time range not recorded) were reclaimed before "
            f"subscriber {self.subscriber} was registered; it starts at {starts}"
        )

    def as_json(self) -> dict[str, Any]:
        """The ``reclaimed_before`` object of ``quiver subscribers add --json``."""
        return {
            "segments": self.segments,
            "at_least": self.at_least,
            "rows": None,
            "partitions": {
                p.partition: {
                    "segments": p.segments,
                    "highest_seq": p.highest,
                    "starts_at": p.starts_at,
                }
                for p in self.parts
            },
        }


def reclaimed_before(state: RegistryState, sub: str, *, at_least: bool = False) -> Reclaimed | None:
    """What the ack log in ``state`` records reclaimed, as seen by ``sub`` (registered
    in it); None when nothing was reclaimed in any partition."""
    sid = state.by_name.get(sub)
    if sid is None:
        return None
    parts = []
    for pid, dl in sorted(state.deleted.items(), key=lambda kv: state.parts.get(kv[0], "")):
        n = dl.hwm + len(dl.gaps)
        if not n:
            continue
        view = state.view(sid, pid)
        parts.append(
            PartReclaimed(
                partition=state.parts.get(pid, f"#{pid}"),
                segments=n,
                highest=max(dl.gaps) if dl.gaps else dl.hwm,
                starts_at=view.hwm + 1,
            )
        )
    return Reclaimed(sub, parts, at_least) if parts else None
