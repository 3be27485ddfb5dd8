"""A Quiver warning logged in a Spark Python worker reaches the console as a log line
with its time and level (``2026-11-28 14:35:09,123 WARNING quiver_spark.segment.catalog
quiver.segment.missing ...``), not as a bare message; with ``QUIVER_LOG_LEVEL=ERROR`` in
the workers' environment it does not appear.

The query reads a store with one segment's data removed under ``failOnDataLoss=false``:
the executor task that meets it warns, and the query goes on.

What the user sees is what the workers write to their stderr, which they inherit from
the driver's JVM (local mode). That JVM started under pytest's capture, so ``capfd``
never sees it: :func:`console` reads the JVM's own stderr back instead.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from quiver_spark.spark.datasource import QuiverDataSource

from .source_helpers import remove_segment_data, write_segments

PROGRESS_BAR = re.compile(r"\r*\[Stage [^\]\n]*\]\r*")
"""Spark's console progress bar (``[Stage 0:> ... (0 + 2) / 2]``), drawn on stderr
with carriage returns between the lines."""

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING quiver_spark\.segment\.catalog "
    r"quiver\.segment\.missing ",
    re.MULTILINE,
)


@contextmanager
def console(spark: Any) -> Iterator[Callable[[], str]]:
    """What Spark's local-mode Python workers write to stderr inside the block (the
    progress bar left out): the stderr the driver's JVM inherited, which its workers
    inherit in turn."""
    path = f"/proc/{spark.sparkContext._gateway.proc.pid}/fd/2"
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = False
    if not regular:
        pytest.skip("the driver JVM's stderr is not a file (pytest -s?): nothing to read back")
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        got: list[bytes] = []
        yield lambda: PROGRESS_BAR.sub("", b"".join(got).decode(errors="replace"))
        got.append(f.read())


def store_with_a_segment_gone(tmp_path: Path) -> str:
    root = str(tmp_path / "store")
    write_segments(root, 2)
    remove_segment_data(root, [1])
    return root


def test_a_workers_warning_shows_its_time_and_level(spark: Any, tmp_path: Path) -> None:
    root = store_with_a_segment_gone(tmp_path)
    with console(spark) as seen:
        rows = spark.read.format("quiver").option("failOnDataLoss", "false").load(root).count()
    assert rows == 10
    assert LINE.search(seen()), seen()[-3000:]
    bare = [x for x in seen().splitlines() if x.startswith("quiver.")]
    assert bare == [], bare
    # once, though the session's workers ran many tasks before: no handler stacked up
    assert seen().count("quiver.source.data_loss partition=p-0 seq=1") == 1, seen()


def test_quiver_log_level_error_silences_a_workers_warning(spark: Any, tmp_path: Path) -> None:
    """The variable as ``spark.executorEnv.QUIVER_LOG_LEVEL`` sets it: the data source is
    registered (under a name of its own) while the context's executor environment holds
    it, so every worker of its queries, planning and tasks, starts with it."""
    root = store_with_a_segment_gone(tmp_path)
    source = type("QuiverAtError", (QuiverDataSource,), {"name": classmethod(lambda c: "qerr")})
    env = spark.sparkContext.environment
    env["QUIVER_LOG_LEVEL"] = "ERROR"
    try:
        spark.dataSource.register(source)
    finally:
        del env["QUIVER_LOG_LEVEL"]
    with console(spark) as seen:
        rows = spark.read.format("qerr").option("failOnDataLoss", "false").load(root).count()
    assert rows == 10
    assert "quiver.segment.missing" not in seen() and "quiver.source.data_loss" not in seen()
