"""The per-partition MANIFESTs of a root (:class:`~.manifest.Manifest`, ARCHITECTURE.md
§11.1), read and written through an :class:`~quiver_spark.objects.ObjectStore`.

Every write goes through the store: the first by ``create`` (if absent), every later
one by ``replace`` at the version it was read at. A change is a pure function of the
manifest it applies to, so a ``replace`` that lost a race re-reads and applies it
again: a writer's publication and a retention pass of another process both land,
whatever their order. A manifest written under a higher epoch than the caller's fences
it (:class:`FencedError`). What a listing cannot tell is kept besides each MANIFEST
(:class:`Facts`: an object root's GONE, :mod:`.gone`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from ..errors import CorruptionError, FencedError, LostRaceError, ObjectExists
from ..format import FRAME_SIZE
from ..layout import manifest as manifest_key
from ..layout import writer_lease as writer_lease_key
from ..objects import ObjectStore
from . import cas
from .lease import stored_epoch
from .manifest import Manifest

log = logging.getLogger("quiver_spark.control.manifest")
"""The MANIFEST's log lines keep the logger they always had."""


def _gone_grew(before: Manifest, after: Manifest) -> bool:
    """Whether a change recorded a seq gone or a transaction sealed and retired."""
    return (
        after.deleted_floor != before.deleted_floor
        or after.deleted_above != before.deleted_above
        or after.txns_gone != before.txns_gone
    )


def empty(partition: str) -> Manifest:
    return Manifest(partition)


class Facts(Protocol):
    """Where a root keeps the facts a listing cannot tell besides each MANIFEST (§11.3)."""

    def kept(self, partition: str) -> Manifest | None:
        """The facts kept for ``partition``; None when there are none to join."""

    def keep(self, manifest: Manifest) -> None:
        """Join ``manifest``'s facts into those kept; OSError when they cannot be."""


class NoFacts:
    """A POSIX root's: a MANIFEST rebuilt there relies on its files and the ack log."""

    def kept(self, partition: str) -> Manifest | None:
        return None

    def keep(self, manifest: Manifest) -> None:
        return None


NO_FACTS = NoFacts()


class ManifestIndex(Protocol):
    """What a segment location asks of its per-partition MANIFESTs (§11.1): a
    :class:`ManifestStore`, or :data:`NO_MANIFESTS` where its readers list."""

    def read(self, partition: str) -> Manifest | None:
        """The MANIFEST as stored now; None when there is none."""

    def for_reader(self, partition: str, build: Callable[[], Manifest]) -> Manifest | None:
        """The MANIFEST a new reader goes by; None: the reader lists."""

    def update(
        self,
        partition: str,
        change: Callable[[Manifest], Manifest],
        *,
        build: Callable[[], Manifest],
    ) -> Manifest | None:
        """``change`` applied and stored; None when nothing is kept."""

    def forget(self, partition: str) -> None:
        """Drop what this handle remembers of ``partition``'s MANIFEST."""


class NoManifests:
    """A segment location without MANIFESTs (a reader on an executor, a location
    opened alone): nothing is read, written or remembered, so every reader lists and a
    publication's ``.meta`` is all there is; no request is made."""

    def read(self, partition: str) -> Manifest | None:
        return None

    def for_reader(self, partition: str, build: Callable[[], Manifest]) -> Manifest | None:
        return None

    def update(
        self,
        partition: str,
        change: Callable[[Manifest], Manifest],
        *,
        build: Callable[[], Manifest],
    ) -> Manifest | None:
        return None

    def forget(self, partition: str) -> None:
        return None


NO_MANIFESTS = NoManifests()


@dataclass
class ManifestStats:
    """What readers met (for logs, metrics and tests)."""

    reads: int = 0
    damaged: int = 0
    """Reads that found the manifest failing verification (the listing was used)."""
    built: int = 0
    """Manifests written from a listing (the one-time upgrade, or after damage)."""


class ManifestStore:
    """The manifests of a root's partitions, through ``objects``.

    ``epoch`` is the writer's (0 on a POSIX root; the lease epoch on an object root).
    The version of the manifest this instance last wrote is remembered per partition,
    so a writer's next change costs one ``replace`` (no read) while nobody else wrote.
    """

    def __init__(self, objects: ObjectStore, *, epoch: int = 0, facts: Facts = NO_FACTS) -> None:
        self.objects = objects
        self.epoch = epoch
        self.facts = facts
        """Where the seqs gone and transactions sealed are kept besides the MANIFEST:
        on an object root ``partitions/<pid>/GONE`` (§15.4, :mod:`.gone`), which a
        MANIFEST rebuilt from a listing after damage joins (a listing cannot tell what
        is gone); nowhere on a POSIX root."""
        self.stats = ManifestStats()
        self._last: dict[str, Manifest] = {}
        self._claimed: dict[str, int] = {}
        self._confirm: dict[str, Callable[[], None]] = {}

    def claim(self, partition: str, epoch: int, confirm: Callable[[], None] | None = None) -> None:
        """This handle writes ``partition`` under lease epoch ``epoch``: its next change
        stores that epoch (fencing every earlier writer), and a stored epoch above it
        fences this handle. Partitions not claimed (a retention pass of another
        process) are changed at whatever epoch they hold, never fenced. ``confirm``
        (the lease's, one GET) raises LeaseLostError unless the lease is still this
        handle's: asked before a MANIFEST that fails verification (whose epoch cannot
        be read) is rewritten, so damage never lifts the fence (§16.2)."""
        self._claimed[partition] = epoch
        if confirm is not None:
            self._confirm[partition] = confirm
        self._last.pop(partition, None)

    def unclaim(self, partition: str) -> None:
        """This handle no longer writes ``partition`` (a sealer that released its lease)."""
        self._claimed.pop(partition, None)
        self._confirm.pop(partition, None)
        self._last.pop(partition, None)

    def _epoch(self, partition: str) -> int:
        return self._claimed.get(partition, self.epoch)

    def check_fence(self, partition: str) -> Manifest | None:
        """Before a claimed holder makes a segment's ``.meta`` (§11.3): one HEAD of the
        MANIFEST; a version other than the one this handle holds makes it read it (one
        GET), and a higher epoch there raises FencedError. So a holder fenced before it
        reaches its ``.meta`` leaves no ``.meta`` behind (an orphan ``.arrow`` is never
        read by anyone); only one paused between this look and its create can, and its
        MANIFEST change is refused all the same. Returns the MANIFEST as it stands (None
        when it cannot be read), so the caller can see a seq recorded gone meanwhile."""
        if partition not in self._claimed:
            return None
        cur = self._last.get(partition)
        version = self.objects.head(manifest_key(partition))
        if cur is not None and cur.version is not None and version == cur.version:
            return cur
        self._last.pop(partition, None)
        if version is None:
            confirm = self._confirm.get(partition)
            if confirm is not None:
                confirm()
            return None
        try:
            m = self.read(partition)
        except CorruptionError:
            confirm = self._confirm.get(partition)
            if confirm is not None:
                confirm()
            return None
        if m is None:
            return None
        mine = self._epoch(partition)
        if m.epoch > mine:
            raise FencedError(self.display(partition), mine, m.epoch)
        self._last[partition] = m
        return m

    def epoch_of(self, partition: str) -> int:
        """The epoch this handle writes ``partition`` at (its claim, else its own)."""
        return self._epoch(partition)

    def _built_epoch(self, partition: str) -> int:
        """The epoch a MANIFEST written from a listing carries: this handle's, and never
        below the one the partition's writer lease records (one GET), so a reader's or
        a retention pass's rebuild never lowers the fence (§16.2)."""
        return max(self._epoch(partition), stored_epoch(self.objects, writer_lease_key(partition)))

    def display(self, partition: str) -> str:
        return self.objects.display(manifest_key(partition))

    def forget(self, partition: str) -> None:
        self._last.pop(partition, None)

    def for_reader(self, partition: str, build: Callable[[], Manifest]) -> Manifest | None:
        """The MANIFEST a new reader goes by (one read): written from a listing by
        ``create`` when it has none (the one-time upgrade); None when it is damaged
        (counted and logged: the reader lists instead)."""
        try:
            m = self.read(partition)
        except CorruptionError as e:
            log.warning(
                "quiver.manifest.damaged path=%s error=%s: the partition is listed instead "
                "(the next writer or retention pass rewrites it; `quiver fsck` names it)",
                self.display(partition),
                e,
            )
            return None
        if m is None:
            m = build()
            try:
                self.create(m)
            except OSError as e:  # a read-only root: the listing still answers
                log.warning(
                    "quiver.manifest.unwritten path=%s error=%s", self.display(partition), e
                )
        return m

    def read(self, partition: str) -> Manifest | None:
        """The manifest as stored now (one GET); None when there is none. A damaged
        one raises CorruptionError (callers fall back to a listing)."""
        got = self.objects.get(manifest_key(partition))
        self.stats.reads += 1
        if got is None:
            return None
        try:
            m = Manifest.decode(self.display(partition), got.data, got.version)
        except CorruptionError:
            self.stats.damaged += 1
            raise
        if m.partition != partition:
            self.stats.damaged += 1
            raise CorruptionError(
                self.display(partition), FRAME_SIZE, f"manifest names partition {m.partition}"
            )
        return m

    def create(self, manifest: Manifest) -> Manifest | None:
        """Store ``manifest`` (made from a listing, joined with the partition's GONE
        copy) if the partition has none; None when one appeared first."""
        manifest = self._with_kept(manifest)
        epoch = self._built_epoch(manifest.partition)
        try:
            version = self.objects.create(
                manifest_key(manifest.partition), manifest.at_epoch(epoch).encode()
            )
        except ObjectExists:
            return None
        self.stats.built += 1
        out = replace(manifest.at_epoch(epoch), version=version)
        self._last[manifest.partition] = out
        return out

    def update(
        self,
        partition: str,
        change: Callable[[Manifest], Manifest],
        *,
        build: Callable[[], Manifest],
    ) -> Manifest:
        """Apply ``change`` to the stored manifest and store the result (If-Match the
        version it applied to); a lost race re-reads and applies it again. ``build``
        makes the manifest from a listing when there is none or it is damaged.

        Raises FencedError when the stored manifest has a higher epoch than ours; an
        OSError other than a precondition leaves the outcome unknown: nothing is
        remembered, and the caller's retry applies ``change`` again (it is idempotent).
        """
        key = manifest_key(partition)
        mine = self._epoch(partition)
        fenced = partition in self._claimed or self.epoch > 0
        read_cur: list[Manifest | None] = [None]  # what the last read found

        def read() -> cas.Current[Manifest]:
            cur = self._last.get(partition)
            if cur is None:
                try:
                    cur = self.read(partition)
                except CorruptionError as e:
                    log.warning("quiver.manifest.damaged path=%s error=%s (rebuilt)", key, e)
                    read_cur[0] = None
                    # rewritten at the damaged version (gone meanwhile: created)
                    return cas.Current(None, self.objects.head(key))
            read_cur[0] = cur
            return cas.Current(cur, cur.version if cur is not None else None)

        def apply(cur: Manifest | None) -> Manifest | None:
            try:
                return applied(cur)
            except BaseException:
                self._last.pop(partition, None)
                raise

        def applied(cur: Manifest | None) -> Manifest | None:
            if cur is not None and fenced and cur.epoch > mine:
                raise FencedError(self.display(partition), mine, cur.epoch)
            if cur is None:
                # never below the newest holder's epoch, whoever writes it
                return change(self._with_kept(build())).at_epoch(
                    max(mine, self._built_epoch(partition))
                )
            new = change(cur)
            if new is cur and cur.epoch >= mine:
                return None  # nothing to change: no write
            return new.at_epoch(mine)

        def fence() -> None:
            if read_cur[0] is None and fenced:
                # missing or unreadable: its epoch cannot be read, so only a holder
                # whose lease is still its own may write it from a listing (§16.2)
                confirm = self._confirm.get(partition)
                if confirm is not None:
                    confirm()

        written = cas.update(
            self.objects,
            key,
            apply,
            read=read,
            encode=lambda new: new.encode(),
            fence=fence,
            lost=lambda: self._last.pop(partition, None),
            give_up=lambda attempts: LostRaceError(
                self.display(partition),
                f"{self.display(partition)}: {attempts} conditional writes in a row lost",
                attempts=attempts,
            ),
        )
        cur = read_cur[0]
        if written is None:
            assert cur is not None
            return cur
        if cur is None:
            self.stats.built += 1
        out = replace(written.value, version=written.version)
        self._last[partition] = out
        if _gone_grew(cur or empty(partition), out):
            self._keep_best_effort(out)
        return out

    def _with_kept(self, built: Manifest) -> Manifest:
        """A MANIFEST made from a listing, joined with the partition's GONE copy."""
        kept = self.facts.kept(built.partition)
        return built if kept is None else built.with_facts(kept)

    def _keep_best_effort(self, manifest: Manifest) -> None:
        try:
            self.facts.keep(manifest)
        except OSError as e:  # retention wrote its removals before this change (§11.3)
            log.warning(
                "quiver.manifest.gone_unwritten partition=%s error=%s (the next change "
                "that records a seq gone writes it again)",
                manifest.partition,
                e,
            )
