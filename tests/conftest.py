"""What every test of the suite shares."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def quiver_logging_restored() -> Iterator[None]:
    """A ``quiver`` command run in-process configures the package's logger for a
    terminal (its own handler, no propagation); put it back after each test, so a later
    test's ``caplog`` still sees the package's log records."""
    logger = logging.getLogger("quiver_spark")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]
