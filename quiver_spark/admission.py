"""Admission of appends under ``retention.size_cap``'s backpressure (ARCHITECTURE.md §15.2).

An append is admitted while the store's bytes, as this handle's last retention pass
counted them plus what it admitted since, are within the cap; over it, the append
waits (bounded by ``retention.backpressure_timeout``) for a pass to make room, and
fails with a retryable :class:`~quiver_spark.errors.StoreAtCapacityError`, naming why
nothing could be reclaimed, if none does. :class:`Admission` holds that count for one
store handle; :func:`wait_for_capacity` is the bounded wait.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from . import format as fmt
from . import layout
from . import metrics as m
from .config import RetentionConfig, SizeCapPolicy
from .errors import CorruptionError, StoreAtCapacityError

log = logging.getLogger(__name__)


class Admission:
    """What one store handle admitted against the size cap since its last count.

    ``held`` is the store's bytes as of the last count (a retention pass, or a survey
    when a pass could not run; None before the first), ``throttled`` whether that count
    was over the cap. A count is taken in two steps around its listing:
    :meth:`counted` before (what was admitted until then is in what the listing sees),
    :meth:`settle` after.
    """

    def __init__(self, root: str, metrics: m.Metrics) -> None:
        self.root = root
        self.metrics = metrics
        self.throttled = False
        self.held: int | None = None
        self._admitted = 0
        self._lock = threading.Lock()

    def counted(self) -> int:
        """Bytes admitted so far: a listing taken after this call includes them."""
        with self._lock:
            return self._admitted

    def settle(self, counted: int, held: int, throttled: bool) -> None:
        """Record a count: the store holds ``held`` bytes, which include the ``counted``
        bytes admitted before its listing."""
        self.throttled = throttled
        with self._lock:
            self._admitted -= counted
            self.held = held

    def admit(
        self,
        nbytes: int,
        config: RetentionConfig,
        *,
        run_pass: Callable[[], bool],
        survey: Callable[[], None],
        on_failure: Callable[[Exception], None],
    ) -> None:
        """Under ``backpressure`` with a size cap, block (bounded) until the store's bytes
        are within the cap. A handle that never counted runs a pass first.

        ``run_pass()`` runs a retention pass and says whether it throttles. A pass that
        fails (an ack log that cannot be read) is handed to ``on_failure``, kept and
        retried, and the bytes are then counted by ``survey()`` (segments and WAL, no
        registry): the store admits within the cap and throttles over it, naming why
        nothing could be reclaimed."""
        if (
            config.size_cap_policy is not SizeCapPolicy.BACKPRESSURE
            or config.size_cap_bytes is None
        ):
            return
        cap = config.size_cap_bytes
        if not (self.throttled or self.held is None) and self._within(cap):
            self._count(nbytes)
            return
        failed: list[Exception] = []

        def check() -> bool:
            try:
                throttled = run_pass()
            except Exception as e:  # kept and retried until the timeout, like any pass
                failed.append(e)
                on_failure(e)
                log.error("quiver.retention.admission_failed root=%s: %s", self.root, e)
                try:  # nothing is reclaimed, but the bytes held still decide
                    survey()
                except Exception as survey_error:
                    log.error("quiver.retention.survey_failed root=%s: %s", self.root, survey_error)
                    return False
                return self._within(cap)
            return not throttled and self._within(cap)

        try:
            wait_for_capacity(check, config.backpressure_timeout_s, self.metrics, poll_s=0.1)
        except StoreAtCapacityError as e:
            if failed:
                raise StoreAtCapacityError(
                    self._unreclaimable_message(cap, failed[-1])
                    or f"{e}; the last retention pass failed: {failed[-1]}"
                ) from failed[-1]
            raise
        self._count(nbytes)

    def _unreclaimable_message(self, cap: int, cause: Exception) -> str | None:
        """Why an append over the cap waited in vain when the pass could not run."""
        if self.held is None or not self.throttled:
            return None
        held = f"store {self.root} holds {self.held} bytes, over retention.size_cap={cap}"
        acklog_dir = os.path.join(self.root, layout.subscribers_dir())
        if isinstance(cause, CorruptionError) and cause.path.startswith(acklog_dir + os.sep):
            return (
                f"{held}, and nothing can be reclaimed while the subscribers' ack log cannot "
                f"be read: {cause}; `quiver fsck {self.root}` reports it; a handle opened "
                "with StoreConfig(salvage=True) reads past the damaged record and its "
                "store.subscribers.checkpoint() rewrites the log without it (a lost "
                "acknowledgement only means redelivery)"
            )
        return (
            f"{held}, and the retention pass that could reclaim space failed: {cause} "
            "(retried by the next append)"
        )

    def _within(self, cap: int) -> bool:
        with self._lock:
            return self.held is not None and self.held + self._admitted <= cap

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self._admitted += nbytes + fmt.WAL_RECORD_SIZE


def wait_for_capacity(
    check: Callable[[], bool],
    timeout_s: float,
    metrics: m.Metrics | None = None,
    *,
    poll_s: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Block until ``check()`` is true; return the seconds waited.

    Counts one ``quiver.ingest.throttle_total`` per throttled call. Raises
    :class:`~quiver_spark.errors.StoreAtCapacityError` (retryable) after
    ``timeout_s``; nothing was written in that case.
    """
    if check():
        return 0.0
    if metrics is not None:
        metrics.inc(m.INGEST_THROTTLE)
    start = clock()
    deadline = start + timeout_s
    log.warning("quiver.ingest.throttle timeout_s=%.1f", timeout_s)
    while True:
        now = clock()
        if now >= deadline:
            raise StoreAtCapacityError(
                f"store is over retention.size_cap and stayed there for {timeout_s:g}s "
                "(size_cap_policy=backpressure): no unacknowledged segment is deleted; "
                "retry after subscribers acknowledge data, or raise the cap"
            )
        sleep(min(poll_s, deadline - now))
        if check():
            return clock() - start
