"""Quiver's logging in a Spark worker (``quiver_spark.logs.configure_worker_logging``):
one stderr handler with time and level on the ``quiver_spark`` logger, once per process
however many tasks call it, at the level ``QUIVER_LOG_LEVEL`` names; nothing at all where
the user configured logging; the root logger never touched; a level it cannot read said
once and WARNING used."""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from quiver_spark import logs

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) quiver_spark\.x (.*)$")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """A process where nothing configured Quiver's logging yet; its stderr."""
    logger = logging.getLogger(logs.LOGGER)
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers[:] = []
    logger.setLevel(logging.NOTSET)
    monkeypatch.setattr(logs, "_configured", False)
    monkeypatch.delenv(logs.LEVEL_ENV, raising=False)
    yield STDERR
    STDERR.seek(0)
    STDERR.truncate()
    logger.handlers[:], logger.level, logger.propagate = saved


STDERR = io.StringIO()
"""The worker's stderr in these tests."""


def configure(root_handlers: list[logging.Handler] | None = None) -> None:
    """``configure_worker_logging`` as a worker calls it, its stderr :data:`STDERR`:
    with ``root_handlers`` on the root logger (none in a Spark worker; pytest keeps its
    own there during a test)."""
    root = logging.getLogger()
    saved = root.handlers[:], sys.stderr
    root.handlers[:] = root_handlers or []
    sys.stderr = STDERR
    try:
        logs.configure_worker_logging()
        assert root.handlers == (root_handlers or []), "the root logger was configured"
    finally:
        root.handlers[:], sys.stderr = saved


def lines(err: io.StringIO) -> list[tuple[str, str]]:
    found = [LINE.match(x) for x in err.getvalue().splitlines()]
    assert all(found), err.getvalue()
    return [(m.group(1), m.group(2)) for m in found if m]


def emit_all() -> None:
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        logging.getLogger("quiver_spark.x").log(
            level, "quiver.test.%s", logging.getLevelName(level)
        )


def test_warnings_and_errors_by_default_with_time_and_level_once_per_process(
    fresh: io.StringIO,
) -> None:
    for _ in range(3):  # three tasks in one reused worker
        configure()
    emit_all()
    assert lines(fresh) == [("WARNING", "quiver.test.WARNING"), ("ERROR", "quiver.test.ERROR")]
    assert len(logging.getLogger(logs.LOGGER).handlers) == 1


@pytest.mark.parametrize("value", ["debug", "INFO", "Warn", " error "])
def test_the_variable_sets_the_level_in_any_case(
    fresh: io.StringIO, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(logs.LEVEL_ENV, value)
    configure()
    emit_all()
    first = {"DEBUG": 0, "INFO": 1, "WARN": 2, "ERROR": 3}[value.strip().upper()]
    names = ["DEBUG", "INFO", "WARNING", "ERROR"][first:]
    assert lines(fresh) == [(n, f"quiver.test.{n}") for n in names]


def test_a_value_naming_no_level_is_said_once_and_warning_is_used(
    fresh: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(logs.LEVEL_ENV, "verbose")
    configure()
    configure()
    emit_all()
    (said, *rest) = fresh.getvalue().splitlines()
    assert " WARNING quiver_spark.logs quiver.log.level_unknown QUIVER_LOG_LEVEL='verbose' " in said
    assert "one of DEBUG, INFO, WARNING, ERROR (any case); WARNING is used" in said
    assert [x.split(" ", 3)[2:] for x in rest] == [
        ["WARNING", "quiver_spark.x quiver.test.WARNING"],
        ["ERROR", "quiver_spark.x quiver.test.ERROR"],
    ]


@pytest.mark.parametrize("where", ["quiver_spark", ""])
def test_logging_the_user_configured_is_left_alone(
    fresh: io.StringIO, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    mine = logging.StreamHandler(io.StringIO())
    monkeypatch.setenv(logs.LEVEL_ENV, "DEBUG")
    logger = logging.getLogger(logs.LOGGER)
    if where:
        logger.addHandler(mine)
    configure([] if where else [mine])
    assert logger.handlers == ([mine] if where else [])
    assert logger.level == logging.NOTSET and logger.propagate
    assert fresh.getvalue() == ""
