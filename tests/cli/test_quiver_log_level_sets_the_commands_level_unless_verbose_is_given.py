"""``QUIVER_LOG_LEVEL`` sets how much a ``quiver`` command logs when no ``-v`` is given;
``-v`` wins. A value that names no level is said once, with the values allowed, and the
command goes on at its default (errors only). Run as a user runs them: real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from .conftest import Built

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) quiver_spark\."
)


def quiver(level: str | None, *args: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "QUIVER_LOG_LEVEL"}
    if level is not None:
        env["QUIVER_LOG_LEVEL"] = level
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def levels(stderr: str) -> set[str]:
    found = [LINE.match(line) for line in stderr.splitlines()]
    assert all(found), f"a line without time and level: {stderr}"
    return {m.group(1) for m in found if m}


def test_info_from_the_variable_prints_info_lines_with_time_and_level(built: Built) -> None:
    out = quiver("info", "status", built.root)
    assert out.returncode == 0, out.stderr
    assert levels(out.stderr) == {"INFO"}, out.stderr  # the ack log's open, among others


def test_verbose_wins_over_the_variable(built: Built) -> None:
    out = quiver("ERROR", "status", built.root, "-v")
    assert out.returncode == 0, out.stderr
    assert "INFO" in levels(out.stderr), out.stderr
    assert quiver("ERROR", "status", built.root).stderr == ""


def test_a_level_the_variable_does_not_name_is_one_warning_and_the_command_goes_on(
    built: Built,
) -> None:
    out = quiver("loud", "status", built.root)
    assert out.returncode == 0, out.stderr
    (line,) = out.stderr.splitlines()
    assert levels(line) == {"WARNING"}
    assert "QUIVER_LOG_LEVEL='loud' is not a log level: one of DEBUG, INFO, WARNING, ERROR" in line
    assert "ERROR is used" in line
