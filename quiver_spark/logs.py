"""Where Quiver's log lines go when nobody else decided: Spark's Python workers, the CLI.

Quiver logs through the standard :mod:`logging` module under the ``quiver_spark``
logger, one event per line (``quiver.segment.vanished partition=... seqs=...``), and
configures nothing when used as a library. Two kinds of process have nobody else to
configure it:

- a Spark Python worker (the driver-side data-source workers, executor tasks): the Spark
  layer calls :func:`configure_worker_logging` at its entry points. Without it a worker's
  warnings reached the console through :data:`logging.lastResort`, bare lines with no
  time or level;
- the ``quiver`` command (``quiver_spark/cli/common.py``), which takes its level from
  ``-v`` and otherwise from :data:`LEVEL_ENV` through :func:`level_from_env`.

:data:`LEVEL_ENV` (``QUIVER_LOG_LEVEL``) names one of :data:`LEVELS`, case-insensitive
(``WARN`` too, Spark's own spelling). A value that is none of them does not fail
anything: the process says so once, on the same stderr, naming the values allowed, and
uses its default. The variable decides only how much Quiver tells; a typo in it must not
stop a streaming query that is moving data (in a worker an error would fail every task
of every query), and the warning is shown whatever the level.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

LOGGER = "quiver_spark"
"""The logger every Quiver module logs under (``quiver_spark.<module>``)."""

LEVEL_ENV = "QUIVER_LOG_LEVEL"
"""The environment variable that sets the level of Quiver's own log lines."""

LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}
"""The levels :data:`LEVEL_ENV` may name (``WARN`` is taken for ``WARNING``)."""

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""``2026-11-28 14:35:09,123 WARNING quiver_spark.segment.catalog quiver.segment...``"""

WORKER_DEFAULT = logging.WARNING
"""A Spark worker's level without :data:`LEVEL_ENV`: quiet while all is well."""

log = logging.getLogger(__name__)


def level_from_env(
    default: int, environ: Mapping[str, str] | None = None
) -> tuple[int, str | None]:
    """``(level, complaint)``: the level :data:`LEVEL_ENV` names, ``default`` when it is
    unset or empty, and ``default`` with a complaint to show when it names no level."""
    raw = (os.environ if environ is None else environ).get(LEVEL_ENV, "").strip()
    if not raw:
        return default, None
    name = raw.upper()
    level = LEVELS.get("WARNING" if name == "WARN" else name)
    if level is not None:
        return level, None
    return default, (
        f"quiver.log.level_unknown {LEVEL_ENV}={raw!r} is not a log level: one of "
        f"{', '.join(LEVELS)} (any case); {logging.getLevelName(default)} is used"
    )


def announce(handler: logging.Handler, complaint: str) -> None:
    """Show ``complaint`` through ``handler`` at WARNING, whatever the logger's level
    (a level that could not be read must not hide the reason)."""
    handler.handle(log.makeRecord(log.name, logging.WARNING, __file__, 0, complaint, (), None))


_configured = False
_lock = threading.Lock()


def configure_worker_logging() -> None:
    """In a Spark Python worker, give Quiver's log lines a time and a level: one stderr
    handler on the ``quiver_spark`` logger at the level :data:`LEVEL_ENV` names
    (:data:`WORKER_DEFAULT` without it).

    Once per process (a reused worker runs many tasks: later calls return at once), and
    only where nothing is configured: a handler on ``quiver_spark`` or on any logger
    above it (the root) is the user's, and then nothing is added and no level is set.
    The root logger is never configured, so a user's own lines are untouched; with no
    handler above ``quiver_spark`` nothing is written twice, so it keeps propagating.
    """
    global _configured
    if _configured:
        return
    with _lock:
        if _configured:
            return
        _configured = True
        logger = logging.getLogger(LOGGER)
        if logger.hasHandlers():
            return
        level, complaint = level_from_env(WORKER_DEFAULT)
        handler = logging.StreamHandler()  # stderr
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.setLevel(level)
        if complaint is not None:
            announce(handler, complaint)
