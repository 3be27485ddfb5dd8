"""The `.arrow` a crashed retention pass left behind is removed by the next pass.

A pass that dies between its two unlinks (the `.meta` gone, the `.arrow` not yet)
leaves a data file no listing of published segments finds; a long-lived handle's next
pass removes it (ARCHITECTURE.md §15.1).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiver_spark.subscribers import Outcome
from tests.stores import writer_and_two_retention_handles


class Crash(BaseException):
    pass


def test_next_pass_removes_the_arrow_a_crashed_pass_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with writer_and_two_retention_handles(tmp_path) as (a, b):
        a.subscribers.record("s", "p-0", [1], Outcome.ACK)

        backend = b.segment_location.backend
        real_remove = backend.remove
        calls = []

        def remove(paths, *args, **kw):  # type: ignore[no-untyped-def]
            calls.append(paths)
            if len(calls) == 2:  # the .meta files went; die before the .arrow files
                raise Crash("process b dies between the two unlinks")
            return real_remove(paths, *args, **kw)

        monkeypatch.setattr(backend, "remove", remove)
        with pytest.raises(Crash):
            b.run_retention()
        arrow = b.segment_location.data_path("p-0", 1)
        assert os.path.exists(arrow)
        assert a.segment_location.published_seqs("p-0") == [2, 3]

        a.run_retention()  # the next pass (b is gone)
        assert not os.path.exists(arrow), "condemned segment's .arrow left on disk"
