"""Keeping a held lease: its renewal in the background (ARCHITECTURE.md §8.2).

A holder rewrites its lease every ``ttl_s / RENEWS_PER_TTL``
(:meth:`~quiver_spark.control.lease.Lease.keep` starts a :class:`LeaseKeeper`), so an
observer never sees one version for the lease's ttl while the holder runs; the
renewal that finds the lease taken over ends the keeping and tells the holder.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ..errors import LeaseLostError

log = logging.getLogger(__name__)

RENEWS_PER_TTL = 3
"""A holder rewrites its lease every ``ttl_s / RENEWS_PER_TTL`` (two may fail)."""


class Renewable(Protocol):
    """What a keeper renews (a :class:`~quiver_spark.control.lease.Lease`)."""

    key: str
    ttl_s: float

    @property
    def url(self) -> str: ...

    def renew(self) -> None: ...


class LeaseKeeper:
    """Renews a lease every ``ttl_s / 3`` on a daemon thread until stopped; records the
    loss (``error``) and calls ``on_lost`` once when the lease was taken over. A
    renewal that failed (``OSError``) is retried sooner; the lease is still held."""

    def __init__(
        self,
        lease: Renewable,
        *,
        interval_s: float | None = None,
        on_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        self.lease = lease
        self.interval_s = interval_s if interval_s is not None else lease.ttl_s / RENEWS_PER_TTL
        self.on_lost = on_lost
        self.error: LeaseLostError | None = None
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"quiver-lease-{lease.key}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def tick(self) -> bool:
        """One renewal; False once the lease is lost (the keeper then stops)."""
        try:
            self.lease.renew()
            self.failures = 0
        except LeaseLostError as e:
            self.error = e
            self._stop.set()
            if self.on_lost is not None:
                self.on_lost(e)
            return False
        except OSError as e:
            self.failures += 1
            log.warning("quiver.lease.renew_failed lease=%s: %s", self.lease.url, e)
        return True

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            if not self.tick():
                return
            wait = self.interval_s if self.failures == 0 else self.interval_s / RENEWS_PER_TTL

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
