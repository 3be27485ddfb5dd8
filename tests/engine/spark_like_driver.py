"""What Spark does with a streaming source, without a JVM, for tests that crash it at
every step: an offset log holding the positions' JSON, a sink keeping one batch per
batch id (a replay overwrites it, and must read what the first run read), ``commit``
after the sink's, and the start of every planned batch acknowledged again
(``latestOffset``). A run dies (:class:`Crash`) at the step it is told to; the next
run goes on from the logs, as a restarted query does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import pytest

from quiver_spark.subscription import Caps, Position, Subscription


class Crash(Exception):
    """The driver process dies here."""


def read_keys(sub: Subscription, start: Position, end: Position) -> list[int]:
    """The ``k`` column of every segment of the batch from ``start`` to ``end``."""
    out: list[int] = []
    for meta in sub.segments(start, end):
        for b in sub.read(meta):
            out += b.column("k").to_pylist()
    return out


def doubled(keys: Iterable[int]) -> list[int]:
    """The keys delivered more than once."""
    return sorted(k for k, n in Counter(keys).items() if n > 1)


class SparkLikeDriver:
    """The offset log, the sink and the steps of one query over every run of it;
    :meth:`before_plan` is what a test does just before a new batch is planned."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self.initial: dict | None = None
        self.offsets: list[dict] = []
        self.committed = 0
        self.sink: dict[int, list[int]] = {}
        self.first_read: dict[int, list[int]] = {}
        self.steps = 0

    def step(self, crash_at: int | None) -> None:
        self.steps += 1
        if crash_at is not None and self.steps == crash_at:
            raise Crash

    def before_plan(self, i: int) -> None:
        """Called before batch ``i`` is planned (not before a replay): nothing here."""

    def run_batches(
        self, sub: Subscription, crash_at: int | None, batches: int, start_at: str | None = None
    ) -> bool:
        """Up to ``batches`` batches on ``sub``, the first run starting at ``start_at``.
        True when the stream has caught up (a plan found nothing new)."""
        if self.initial is None:
            self.initial = sub.start(start_at).to_json()
            self.step(crash_at)
        for _ in range(batches):
            i = self.committed
            start = Position.from_json(self.offsets[i - 1] if i else self.initial)
            if i == len(self.offsets):  # plan a new batch
                self.before_plan(i)
                if i:
                    sub.ack(start)  # latestOffset(start)
                end = sub.next_batch_end(start, self.caps)
                if not end.is_after(start):
                    return True
                self.offsets.append(end.to_json())
                self.step(crash_at)
            end = Position.from_json(self.offsets[i])
            got = read_keys(sub, start, end)
            if i in self.first_read:  # a replay reads the same rows
                assert got == self.first_read[i], (i, got, self.first_read[i])
            self.first_read.setdefault(i, got)
            self.step(crash_at)
            self.sink[i] = got
            self.committed = i + 1
            self.step(crash_at)
            sub.ack(end)
            self.step(crash_at)
        return False

    def delivered(self) -> list[int]:
        """The sink's keys, batch after batch."""
        return [k for i in sorted(self.sink) for k in self.sink[i]]


def until_caught_up(run: Callable[[int | None], bool], crash_at: int | None, runs: int) -> None:
    """Restart ``run`` (one life of the query: True once it caught up) until it catches
    up, the first dying at step ``crash_at``; fails the test after ``runs`` runs."""
    for _ in range(runs):
        try:
            if run(crash_at):
                return
        except Crash:
            crash_at = None  # one crash; the restarts go on from the logs
    pytest.fail("the stream never caught up")
