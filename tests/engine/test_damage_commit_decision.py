"""A commit decision is created exclusively: two committers of one (app, version)
never both win, and the loser reads the winner's decision (ARCHITECTURE.md §10)."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from quiver_spark.fs import FileIO

from ..faults import FaultyIO
from ..stores import posix_commit_log


class _RacingIO(FileIO):
    """Lets a second committer decide the same batch just as this one starts writing."""

    def __init__(self, root: str, other_winners: list[tuple[str, int]]) -> None:
        super().__init__()
        self.root = root
        self.other_winners = other_winners
        self.other_result: bool | None = None

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if op == "open" and ".commit" in path and self.other_result is None:
            self.other_result = posix_commit_log(self.root).commit("q", 7, self.other_winners, 2)


def test_two_committers_of_one_batch_never_both_win(tmp_path: Path) -> None:
    root = str(tmp_path)
    io = _RacingIO(root, [("p-1", 9)])
    mine = posix_commit_log(root, io).commit("q", 7, [("p-0", 3)], 1)
    assert io.other_result is True, "the committer that finished first decided the batch"
    assert mine is False, "a second decision of the same batch was reported as written"
    decided = posix_commit_log(root).get("q", 7)
    assert decided is not None and decided.winners == frozenset({("p-1", 9)})
    loser_view = posix_commit_log(root, io).get("q", 7)
    assert loser_view is not None and loser_view.winners == decided.winners


def _commit_many(root: str, who: int, versions: int, out: mp.Queue) -> None:
    log = posix_commit_log(root)
    won = [v for v in range(versions) if log.commit("q", v, [(f"p-{who}", 1)], 1)]
    out.put((who, won))


def test_racing_processes_each_version_has_exactly_one_winner_and_it_is_on_disk(
    tmp_path: Path,
) -> None:
    root, versions = str(tmp_path), 300
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_commit_many, args=(root, i, versions, out)) for i in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    for v in range(versions):
        winners = [who for who, won in results.items() if v in won]
        assert len(winners) == 1, f"version {v} won by {winners}"
        decided = posix_commit_log(root).get("q", v)
        assert decided is not None and decided.winners == frozenset({(f"p-{winners[0]}", 1)})
    assert not [n for n in os.listdir(tmp_path / "commits" / "q") if not n.endswith(".commit")]


def test_the_exclusive_create_is_seen_by_the_fault_layer_and_a_failure_decides_nothing(
    tmp_path: Path,
) -> None:
    io = FaultyIO()
    io.fail("link", 1, errno.EIO)
    with pytest.raises(OSError):
        posix_commit_log(str(tmp_path), io).commit("q", 1, [("p-0", 1)], 1)
    assert posix_commit_log(str(tmp_path)).get("q", 1) is None
    assert posix_commit_log(str(tmp_path), FaultyIO()).commit("q", 1, [("p-0", 2)], 1) is True
    ops = [t.op for t in io.trace]
    assert "link" in ops and ops.index("fsync") < ops.index("link")
