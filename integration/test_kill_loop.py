"""Real kill -9 of a writer process at random times; zero acknowledged rows lost.

Each round forks a writer (``kill_writer.write_forever``) against the same store,
lets it run for a random 20-250 ms, kills it with SIGKILL, then reopens the store here and audits:
every acknowledged id is present exactly once, and the recovered ids are a
contiguous prefix (no holes). ``make test`` runs 50 rounds; ``make soak`` 2000.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration.kill_writer import write_forever
from quiver_spark import QuiverStore

ROUNDS = int(os.environ.get("QUIVER_KILL_ROUNDS", "50"))


@dataclass(frozen=True)
class Recovered:
    """What a reopened store holds of the ``id`` column."""

    rows: int
    distinct: int
    low: int
    top: int  # -1 when empty

    @property
    def contiguous(self) -> bool:
        """Exactly the ids ``0 .. top``, each once."""
        return self.rows == self.distinct == self.top + 1 and (self.rows == 0 or self.low == 0)


def _recovered_ids(root: Path) -> tuple[Recovered, float]:
    t0 = time.monotonic()
    with QuiverStore.open(str(root), partition="p-0", background=False) as store:
        opened = time.monotonic() - t0
        store.finalize()
        ids = pa.chunked_array(
            [pc.cast(b.column("id"), pa.int64()) for b in store.scan()], type=pa.int64()
        )
    if len(ids) == 0:
        return Recovered(0, 0, -1, -1), opened
    bounds = pc.min_max(ids)
    return Recovered(
        len(ids), pc.count_distinct(ids).as_py(), bounds["min"].as_py(), bounds["max"].as_py()
    ), opened


def _spawn(root: Path, next_id: int, flush_interval: float) -> tuple[int, int]:
    """Fork after imports (10x cheaper than a new interpreter); the child writes forever."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns, dies by SIGKILL
        os.close(r)
        try:
            write_forever(str(root), next_id, flush_interval, w)
        finally:
            os._exit(3)
    os.close(w)
    return pid, r


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode()


def _run_rounds(tmp_path: Path, rounds: int, flush_interval: float) -> None:
    root = tmp_path / "store"
    rng = random.Random(6)
    next_id = 0
    rounds_with_acks = 0
    worst_open = 0.0
    for r in range(rounds):
        pid, fd = _spawn(root, next_id, flush_interval)
        first = os.read(fd, 5)
        assert first == b"open\n", f"round {r}: writer failed to open ({first!r})"
        time.sleep(rng.uniform(0.02, 0.25))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"round {r}: writer exited on its own (status {status})"
        )
        out = _read_all(fd)
        acked = [int(line.split()[1]) for line in out.splitlines() if line.startswith("acked ")]
        got, opened = _recovered_ids(root)
        worst_open = max(worst_open, opened)
        assert got.rows == got.distinct, f"round {r}: duplicated ids after recovery: {got}"
        assert got.contiguous, f"round {r}: recovered ids have holes: {got}"
        top = got.top
        if acked:
            assert top >= acked[-1], f"round {r}: acked id {acked[-1]} lost (recovered {top})"
            rounds_with_acks += 1
        next_id = top + 1
    assert rounds_with_acks >= rounds // 2, "too few rounds acknowledged anything to mean much"
    print(
        f"\nT6 kill -9: {rounds}/{rounds} rounds, 0 acknowledged rows lost, "
        f"{rounds_with_acks} rounds with acks, {next_id} rows recovered, "
        f"worst reopen {worst_open * 1000:.1f} ms"
    )


def test_kill_9_of_a_writer_never_loses_an_acknowledged_row(tmp_path: Path) -> None:
    _run_rounds(tmp_path, ROUNDS, 0.025)


def test_kill_9_with_fsync_on_every_append_never_loses_an_acknowledged_row(tmp_path: Path) -> None:
    _run_rounds(tmp_path, max(10, ROUNDS // 5), 0.0)


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_kill_9_soak_thousands_of_rounds(tmp_path: Path) -> None:
    _run_rounds(tmp_path, int(os.environ.get("QUIVER_KILL_ROUNDS", "2000")), 0.025)
