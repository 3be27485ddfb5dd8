"""What every test of the suite shares."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from quiver_spark.control import lease
from quiver_spark.objects.memory import reset_memory


@pytest.fixture(autouse=True)
def quiver_logging_restored() -> Iterator[None]:
    """A ``quiver`` command run in-process configures the package's logger for a
    terminal (its own handler, no propagation); put it back after each test, so a later
    test's ``caplog`` still sees the package's log records."""
    logger = logging.getLogger("quiver_spark")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


@pytest.fixture
def observed_leases_forgotten() -> Iterator[None]:
    """The lease versions this process watched (the takeover clocks of §12.3) are
    forgotten after the test, so a later test's lease of the same key starts unseen."""
    yield
    lease._seen.clear()


@pytest.fixture
def fresh_memory(observed_leases_forgotten: None) -> Iterator[None]:
    """The in-process ``memory://`` buckets are empty when the test starts and again
    after it (for test modules that ask: ``pytest.mark.usefixtures("fresh_memory")``)."""
    reset_memory()
    yield
    reset_memory()


@pytest.fixture
def bucket(fresh_memory: None) -> str:
    """A ``memory://`` bucket name no other test uses, in fresh memory."""
    return f"b-{uuid.uuid4().hex[:8]}"
