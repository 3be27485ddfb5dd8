"""Conditional writes are exclusive: when several threads create the same key, or
replace the same version of a key, at once, exactly one of them succeeds and the
object holds the winner's bytes, in every round."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from quiver_spark.errors import PreconditionFailed
from quiver_spark.objects import ObjectStore
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects

THREADS = 6
ROUNDS = 40


@pytest.fixture(params=["memory", "local"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryObjects(f"race-{uuid.uuid4().hex}")
    return LocalObjects(str(tmp_path))


def _race(write: Callable[[int], str]) -> list[tuple[int, str]]:
    """Runs ``write(i)`` in THREADS threads released together; the (i, version) of
    each one that succeeded."""
    start = threading.Barrier(THREADS)
    won: list[tuple[int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait()
        try:
            v = write(i)
        except PreconditionFailed:
            return
        except BaseException as e:
            errors.append(e)
            return
        with lock:
            won.append((i, v))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return won


def test_exactly_one_of_racing_creates_of_a_key_wins(objects: ObjectStore) -> None:
    for r in range(ROUNDS):
        key = f"commits/app/{r:020d}.commit"
        won = _race(lambda i, key=key: objects.create(key, f"writer-{i}".encode()))
        assert len(won) == 1, f"round {r}: {len(won)} creates succeeded"
        got = objects.get(key)
        assert got is not None
        assert (got.data, got.version) == (f"writer-{won[0][0]}".encode(), won[0][1])


def test_exactly_one_of_racing_replaces_of_a_version_wins(objects: ObjectStore) -> None:
    version = objects.create("partitions/p-0/LEASE", b"epoch-0")
    for r in range(ROUNDS):
        base = version
        won = _race(
            lambda i, base=base, r=r: objects.replace(
                "partitions/p-0/LEASE", f"epoch-{r + 1}-writer-{i}".encode(), version=base
            )
        )
        assert len(won) == 1, f"round {r}: {len(won)} replaces succeeded"
        got = objects.get("partitions/p-0/LEASE")
        assert got is not None
        assert got.data == f"epoch-{r + 1}-writer-{won[0][0]}".encode()
        version = won[0][1]
        assert got.version == version != base
