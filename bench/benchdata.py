"""What the benchmarks share: distinct 10k-row batches of a fixed schema, and the record
of a run (date, machine, load, versions) that every result file carries under ``run``.

``bench/tables.py`` heads each README table with that record, so a figure is always
read beside the date, the code and the load it was measured under.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa

ROWS = 10_000
REPO = Path(__file__).resolve().parents[1]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                             timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _commit() -> str | None:
    """The checkout's commit, ``-dirty`` when a tracked file differs from it (the
    results the benchmarks write themselves do not count)."""
    sha = _git("rev-parse", "--short=10", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                   ":(exclude)bench/results")  # fmt: skip
    return (sha + ("-dirty" if changed else "")) or None


def run_started(argv: list[str] | None = None) -> dict[str, Any]:
    """The record of a benchmark run, taken as it starts: UTC date, the command, cores,
    the 1/5/15-minute load averages, Python, pyarrow and pyspark versions, the commit.
    :func:`run_ended` completes it; the run's JSON stores it as ``"run"``."""
    args = sys.argv if argv is None else argv
    script = Path(args[0])
    where = f"bench/{script.name}" if script.parent.resolve() == REPO / "bench" else str(script)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", where, *args[1:]]),
        "cores": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.machine(),
        "python": platform.python_version(),
        "pyarrow": _version("pyarrow"),
        "pyspark": _version("pyspark"),
        "commit": _commit(),
    }


def run_ended(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with the load averages at the end of the run and its duration in seconds."""
    started = dt.datetime.fromisoformat(run["date"])
    return {
        **run,
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round((dt.datetime.now(dt.UTC) - started).total_seconds()),
    }


def distinct_batches(k: int = 8) -> list[pa.RecordBatch]:
    """``k`` distinct 10k-row batches (int64, float64, timestamp, ~45-byte string)."""
    base = dt.datetime(2026, 1, 1)
    out = []
    for j in range(k):
        ids = range(j * ROWS, (j + 1) * ROWS)
        out.append(
            pa.record_batch(
                {
                    "id": pa.array(ids, pa.int64()),
                    "value": pa.array([i * 0.25 for i in ids], pa.float64()),
                    "ts": pa.array(
                        [base + dt.timedelta(microseconds=i) for i in ids], pa.timestamp("us")
                    ),
                    "text": pa.array([f"event-{i:012d}-" + "x" * 32 for i in ids]),
                }
            )
        )
    return out


def earlier_runs(earlier: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """For a run that keeps ``parts`` of an earlier result file (``--only``): the record
    of the run that measured each, ``None`` where that file did not record it. The new
    file stores them as ``"earlier_runs"``; its other parts belong to its ``"run"``."""
    kept = earlier.get("earlier_runs", {})
    return {p: kept.get(p, earlier.get("run")) for p in parts}
