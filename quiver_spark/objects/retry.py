"""One retry for every conditional write of a cloud root (ARCHITECTURE.md §2.2).

A conditional ``PUT`` (``create``: ``If-None-Match: *``; ``replace``: ``If-Match``)
cannot be retried blindly: a retry whose first attempt had landed answers 412, which
reads as a failed condition. :func:`write_conditionally` retries it the one safe way:

- a *transient* failure (an ``OSError`` other than :class:`PermissionError`,
  :class:`FileNotFoundError` and :class:`~quiver_spark.errors.RequestRejected`, such as a
  :class:`~quiver_spark.errors.StorageConfigError`, unless it is ``retryable``: a 5xx,
  a 409 :class:`~quiver_spark.errors.ObjectConflict`, a dropped connection, a timeout,
  an endpoint that did not answer a read-back)
  is retried with the same bytes and the same condition, after a jittered exponential
  pause, while the budget lasts;
- a failed condition (:class:`~quiver_spark.errors.ObjectExists`,
  :class:`~quiver_spark.errors.VersionMismatch`) met by the *first* attempt, or after only 409s (nothing written), is raised at once;
- met after an attempt of unknown outcome (anything transient but a 409), it is
  resolved by reading the key back: when it holds exactly these bytes the earlier
  attempt landed and the write succeeded (the version read is returned); otherwise the
  failed condition is raised (another write is there now: ours never landed, or landed
  and was replaced since);
- when no attempt may start within the budget any more,
  :class:`~quiver_spark.errors.RetriesExhausted` names the key, the attempts, the time spent and the budget.

Every attempt carries the same condition, so each one that lands late is refused by
the storage like any other write racing it. The one thing a retry adds: a ``create``
whose landed attempt was deleted by another process within the budget may land again
(keys that others delete after creation tolerate this: see §2.2).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ObjectConflict, PreconditionFailed, RequestRejected, RetriesExhausted
from ..option_table import STORAGE_RETRY_TIMEOUT_DEFAULT
from .base import Stored

log = logging.getLogger(__name__)

RETRY_TIMEOUT_OPTION = "retry_timeout"
"""The storage option (Spark: ``storage.retry_timeout``) that sets :attr:`RetryBudget.timeout_s`."""

DEFAULT_RETRY_TIMEOUT_S: float = STORAGE_RETRY_TIMEOUT_DEFAULT
"""How long a conditional write is retried by default (60 s: obstore's budget for reads)."""

INIT_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
"""The pause before retry ``n`` (from 1) is uniform in ``[0, min(MAX, INIT * 2**(n-1))]``
(full jitter: writers failing together spread out), obstore's bounds for reads."""


@dataclass(frozen=True)
class RetryBudget:
    """How long, and at what pace, a conditional write is retried."""

    timeout_s: float = DEFAULT_RETRY_TIMEOUT_S
    init_backoff_s: float = INIT_BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    jitter: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def pause(self, retry: int) -> float:
        """The pause before retry number ``retry`` (1, 2, ...)."""
        cap = min(self.max_backoff_s, self.init_backoff_s * 2 ** min(retry - 1, 32))
        return self.jitter() * cap


def transient(e: BaseException) -> bool:
    """Whether a failed conditional write may be sent again as it was."""
    if isinstance(e, RequestRejected) and getattr(e, "retryable", False):
        return True  # EndpointUnreachableError: a storage that is down may come back
    return isinstance(e, OSError) and not isinstance(
        e, PermissionError | FileNotFoundError | RequestRejected | RetriesExhausted
    )


def write_conditionally(
    op: str,
    shown: str,
    data: bytes,
    attempt: Callable[[], str],
    read: Callable[[], Stored | None],
    budget: RetryBudget,
) -> str:
    """The version ``attempt()`` (one conditional write of ``data``) gave, retried as
    the module docstring says; ``read()`` reads the key back; ``op`` and ``shown`` (the
    key as messages show it) name the write in messages."""
    started = budget.clock()
    attempts = 0
    unknown = False  # an earlier attempt may have landed
    last: OSError | None = None
    while True:
        attempts += 1
        try:
            version = attempt()
        except PreconditionFailed:
            if not unknown:
                raise
            try:
                got = read()
            except OSError as e:
                if not transient(e):
                    raise
                last = e  # still unknown: the next attempt reads back again
            else:
                if got is None or got.data != data:
                    raise
                _note(op, shown, attempts, budget.clock() - started, last)
                return got.version
        except OSError as e:
            if not transient(e):
                raise
            unknown = unknown or not isinstance(e, ObjectConflict)
            last = e
        else:
            if attempts > 1:
                _note(op, shown, attempts, budget.clock() - started, last)
            return version
        pause = budget.pause(attempts)
        spent = budget.clock() - started
        if spent + pause >= budget.timeout_s:
            outcome = (
                "whether it was written is unknown (read the key back)"
                if unknown
                else "nothing was written (every attempt met another conditional write: 409)"
            )
            raise RetriesExhausted(
                shown,
                f"{op} {shown}: still failing after {attempts} attempts over {spent:.1f}s, "
                f"the retry budget being {budget.timeout_s:g}s (storage.{RETRY_TIMEOUT_OPTION}); "
                f"{outcome}; last error: {last}",
                attempts=attempts,
                written_nothing=not unknown,
            ) from last
        budget.sleep(pause)


def _note(op: str, shown: str, attempts: int, spent: float, last: OSError | None) -> None:
    log.warning(
        "quiver.objects.retried op=%s key=%s attempts=%d seconds=%.2f last_error=%s",
        op,
        shown,
        attempts,
        spent,
        last,
    )
