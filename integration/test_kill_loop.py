"""T6: real kill -9 of a writer process at random times; zero acknowledged rows lost.

Each round starts ``kill_writer.py`` against the same store, lets it run for a
random 50-400 ms, kills it with SIGKILL, then reopens the store here and audits:
every acknowledged id is present exactly once, and the recovered ids are a
contiguous prefix (no holes). ``make test`` runs 50 rounds; ``make soak`` 2000.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from quiver_spark import QuiverStore

WRITER = Path(__file__).with_name("kill_writer.py")
ROUNDS = int(os.environ.get("QUIVER_KILL_ROUNDS", "50"))


def _recovered_ids(root: Path) -> tuple[list[int], float]:
    t0 = time.monotonic()
    with QuiverStore.open(str(root), partition="p-0", background=False) as store:
        opened = time.monotonic() - t0
        store.finalize()
        ids: list[int] = []
        for batch in store.scan():
            ids.extend(pc.cast(batch.column("id"), "int64").to_pylist())
    return ids, opened


def _run_rounds(tmp_path: Path, rounds: int, flush_interval: str) -> None:
    root = tmp_path / "store"
    rng = random.Random(6)
    next_id = 0
    acked_total = 0
    worst_open = 0.0
    for r in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(root), str(next_id), flush_interval],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("open "), first
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acked = [int(line.split()[1]) for line in out.splitlines() if line.startswith("acked ")]
        ids, opened = _recovered_ids(root)
        worst_open = max(worst_open, opened)
        assert len(ids) == len(set(ids)), f"round {r}: duplicated ids after recovery"
        top = max(ids) if ids else -1
        assert sorted(ids) == list(range(top + 1)), f"round {r}: recovered ids have holes"
        if acked:
            assert top >= acked[-1], f"round {r}: acked id {acked[-1]} lost (recovered {top})"
            acked_total += 1
        next_id = top + 1
    print(
        f"\nT6 kill -9: {rounds}/{rounds} rounds, 0 acknowledged rows lost, "
        f"{acked_total} rounds with acks, worst reopen {worst_open * 1000:.1f} ms"
    )


def test_kill_9_of_a_writer_never_loses_an_acknowledged_row(tmp_path: Path) -> None:
    _run_rounds(tmp_path, ROUNDS, "0.025")


def test_kill_9_with_fsync_on_every_append_never_loses_an_acknowledged_row(tmp_path: Path) -> None:
    _run_rounds(tmp_path, max(10, ROUNDS // 5), "0")


@pytest.mark.soak
def test_kill_9_soak_thousands_of_rounds(tmp_path: Path) -> None:
    _run_rounds(tmp_path, int(os.environ.get("QUIVER_KILL_ROUNDS", "2000")), "0.025")
