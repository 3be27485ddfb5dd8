"""A consumer stopped right after its last acknowledgement leaves nothing for good.

An acknowledgement is durable before its retention pass starts (``Subscription.ack``).
A process stopped in between (a streaming query stopped, its Python worker killed, a
pod evicted) leaves segments every subscriber acknowledged in the store: no process is
left whose pass would delete them. The next pass of any handle deletes them: ``quiver
gc`` (a store's one pass) and a consumer's next acknowledgement, which runs a pass
even with nothing new to record when it is its handle's first (and then at most every
5 s). On both roots, and nothing another subscriber
still needs goes with them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.subscription import Caps, Subscription
from tests.stores import int_segments, wal_in

pytestmark = pytest.mark.usefixtures("fresh_memory")


class _Stopped(BaseException):
    """The process ends where it stands: nothing after this point runs."""


def _root(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / "store") if kind == "posix" else "memory://bkt/store"


def _cfg(root: str, tmp_path: Path, host: str) -> StoreConfig | None:
    """A POSIX root keeps the WAL root it recorded; each handle on an object root has
    its own WAL directory, as a machine does."""
    return wal_in(tmp_path / f"wal-{host}") if root.startswith("memory://") else None


def _present(root: str, tmp_path: Path) -> set[int]:
    with QuiverStore.open(
        root, _cfg(root, tmp_path, "audit"), partition=None, create=False, background=False
    ) as qs:
        return {m.seq for m in qs.segments()}


def _read_all(sub: Subscription) -> None:
    while (batch := sub.poll()) is not None:
        sub.ack(batch.end)


def _gc(root: str, tmp_path: Path) -> None:
    with QuiverStore.open(
        root, _cfg(root, tmp_path, "gc"), partition=None, create=False, background=False
    ) as qs:
        qs.run_retention()


def _next_ack(root: str, tmp_path: Path) -> None:
    with Subscription.open(root, "b", config=_cfg(root, tmp_path, "b2")) as again:
        assert again.poll() is None  # everything was acknowledged before the stop
        assert again.ack(again.acked()) == 0  # nothing new; the pass runs all the same


@pytest.mark.parametrize("kind", ["posix", "memory"])
@pytest.mark.parametrize(
    "next_pass", [_gc, _next_ack], ids=["quiver gc", "the consumer's next acknowledgement"]
)
def test_segments_left_by_a_pass_cut_short_after_the_last_acknowledgement_are_reclaimed(
    tmp_path: Path, kind: str, next_pass: Callable[[str, Path], None]
) -> None:
    root = _root(kind, tmp_path)
    int_segments(root, [(0, 1), (1, 1), (2, 1)], config=wal_in(tmp_path / "wal-w"))
    for name in ("a", "b"):
        with Subscription.open(root, name, config=_cfg(root, tmp_path, name)) as sub:
            sub.start("earliest")
    with Subscription.open(root, "keeper", config=_cfg(root, tmp_path, "k")) as keeper:
        keeper.start("earliest")
        first = keeper.poll(Caps(max_segments=1))
        assert first is not None
        keeper.ack(first.end)  # the keeper still needs seqs 2 and 3
    with Subscription.open(root, "a", config=_cfg(root, tmp_path, "a")) as a:
        _read_all(a)

    b = Subscription.open(root, "b", config=_cfg(root, tmp_path, "b"))
    batch = b.poll()
    assert batch is not None

    def stopped() -> None:
        raise _Stopped()

    b.store.run_retention = stopped  # type: ignore[method-assign]
    with pytest.raises(_Stopped):
        b.ack(batch.end)  # durable; the process stops before its pass
    b.close()
    assert _present(root, tmp_path) == {1, 2, 3}, "the cut pass deleted nothing"

    next_pass(root, tmp_path)
    assert _present(root, tmp_path) == {2, 3}, (
        "seq 1, acknowledged by all three, is reclaimed; 2 and 3 stay for the keeper"
    )
    with Subscription.open(root, "keeper", config=_cfg(root, tmp_path, "k")) as keeper:
        _read_all(keeper)
        assert keeper.acked().segments == {"p-0": 3}
    assert _present(root, tmp_path) == set()
