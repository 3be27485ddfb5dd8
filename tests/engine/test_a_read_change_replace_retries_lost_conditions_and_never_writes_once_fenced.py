"""The one read-change-write loop of every control object (:func:`quiver_spark.control.cas.update`):
it creates an absent key and replaces a present one at the version it read; a write
that lost its condition or met a 409 reads again and runs the change again, up to
:data:`~quiver_spark.control.cas.ATTEMPTS` times, then fails naming the key; a change
that returns None writes nothing; a fence that raises stops the write; a write whose
answer was lost counts as written when reading back finds its bytes."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from quiver_spark.control import cas
from quiver_spark.errors import LeaseLostError, ObjectConflict
from quiver_spark.objects import ObjectStore
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects

KEY = "control/COUNTER"


@pytest.fixture(params=["memory", "local"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryObjects(f"cas-{uuid.uuid4().hex}", "root")
    return LocalObjects(str(tmp_path))


def _add(n: int):  # type: ignore[no-untyped-def]
    def change(cur: int | None) -> int:
        return (cur or 0) + n

    return change


def _increment(objects: ObjectStore, n: int = 1, **kw: object) -> cas.Written[int] | None:
    return cas.update(
        objects,
        KEY,
        _add(n),
        decode=lambda got: int(got.data),
        encode=lambda v: str(v).encode(),
        sleep=lambda _: None,
        **kw,  # type: ignore[arg-type]
    )


def test_an_absent_key_is_created_and_a_present_one_replaced_at_its_version(
    objects: ObjectStore,
) -> None:
    first = _increment(objects)
    assert first is not None and first.value == 1
    second = _increment(objects, 2)
    assert second is not None and second.value == 3
    got = objects.get(KEY)
    assert got is not None and got.data == b"3" and got.version == second.version


def test_concurrent_changes_all_land_because_each_lost_race_reads_again(
    objects: ObjectStore,
) -> None:
    threads, each = 4, 10
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            for _ in range(each):
                _increment(objects, attempts=1000)
        except BaseException as e:  # reported below
            errors.append(e)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    got = objects.get(KEY)
    assert got is not None and int(got.data) == threads * each


def test_a_key_that_keeps_changing_fails_after_the_bound_naming_the_key(
    objects: ObjectStore,
) -> None:
    objects.create(KEY, b"0")
    reads = 0

    def meddle(cur: int | None) -> int:
        nonlocal reads
        reads += 1
        objects.put(KEY, b"100")  # another writer lands between every read and write
        return (cur or 0) + 1

    with pytest.raises(OSError, match=f"{KEY}: {cas.ATTEMPTS} conditional writes in a row lost"):
        cas.update(
            objects,
            KEY,
            meddle,
            decode=lambda got: int(got.data),
            encode=lambda v: str(v).encode(),
            sleep=lambda _: None,
        )
    assert reads == cas.ATTEMPTS
    got = objects.get(KEY)
    assert got is not None and got.data == b"100"


def test_conflicts_are_retried_up_to_the_bound_then_the_sites_own_error_is_raised() -> None:
    objects = MemoryObjects(f"cas-{uuid.uuid4().hex}", "root")
    objects.create(KEY, b"7")
    refused = 0

    def conflict(op: str, key: str) -> None:
        nonlocal refused
        if op == "replace":
            refused += 1
            raise ObjectConflict(objects.display(key), "409 ConditionalRequestConflict")

    objects.faults.before = conflict
    pauses: list[float] = []
    with pytest.raises(RuntimeError, match="gave up after 5"):
        cas.update(
            objects,
            KEY,
            _add(1),
            decode=lambda got: int(got.data),
            encode=lambda v: str(v).encode(),
            attempts=5,
            give_up=lambda n: RuntimeError(f"{KEY} gave up after {n}"),
            sleep=pauses.append,
        )
    assert refused == 5
    assert len(pauses) == 3  # a jittered pause after each loss from the second on
    assert all(0 <= p <= cas.PAUSE_MAX_S for p in pauses)
    got = objects.get(KEY)
    assert got is not None and got.data == b"7"

    refused = 0
    objects.faults.before = lambda op, key: conflict(op, key) if refused < 2 else None
    written = _increment(objects)
    assert written is not None and written.value == 8


def test_a_change_returning_none_writes_nothing(objects: ObjectStore) -> None:
    assert (
        cas.update(objects, KEY, lambda cur: None, decode=lambda got: got.data, encode=lambda v: v)
        is None
    )
    assert objects.get(KEY) is None
    objects.create(KEY, b"5")
    version = objects.head(KEY)
    assert (
        cas.update(objects, KEY, lambda cur: None, decode=lambda got: got.data, encode=lambda v: v)
        is None
    )
    assert objects.head(KEY) == version


def test_a_fence_that_fails_stops_the_write_and_runs_before_every_attempt(
    objects: ObjectStore,
) -> None:
    objects.create(KEY, b"1")
    checks = 0

    def moved() -> None:
        nonlocal checks
        checks += 1
        raise LeaseLostError(objects.display("LEASE"), 3, 4, "it now has epoch 4")

    with pytest.raises(LeaseLostError):
        _increment(objects, fence=moved)
    got = objects.get(KEY)
    assert checks == 1 and got is not None and got.data == b"1"

    checks = 0
    races = 0

    def held() -> None:
        nonlocal checks, races
        checks += 1
        if races < 2:  # another writer lands between the check and the write twice
            races += 1
            objects.put(KEY, b"10")

    written = _increment(objects, fence=held)
    assert written is not None and written.value == 11
    assert checks == 3


def test_a_write_whose_answer_was_lost_is_raised_unless_the_caller_resolves_it() -> None:
    objects = MemoryObjects(f"cas-{uuid.uuid4().hex}", "root")

    def lose_answer(op: str, key: str) -> None:
        if op == "create":
            raise OSError("connection reset after the write")

    objects.faults.after = lose_answer
    with pytest.raises(OSError, match="connection reset"):
        _increment(objects)
    got = objects.get(KEY)
    assert got is not None and got.data == b"1"  # it landed; the loop does not guess
    objects.faults.after = None
    written = _increment(objects)  # the next call reads what landed and goes on from it
    assert written is not None and written.value == 2


def test_a_write_whose_answer_was_lost_is_resolved_the_callers_way_when_it_says_how() -> None:
    objects = MemoryObjects(f"cas-{uuid.uuid4().hex}", "root")
    objects.create(KEY, b"1")

    def lose_answer(op: str, key: str) -> None:
        if op == "replace":
            raise OSError("reset")

    objects.faults.after = lose_answer
    asked: list[bytes] = []

    def landed() -> str | None:
        got = objects.get(KEY)
        assert got is not None
        asked.append(got.data)
        return got.version if got.data == b"2" else None

    written = _increment(objects, resolve=landed)
    assert written is not None and written.value == 2 and asked == [b"2"]
    got = objects.get(KEY)
    assert got is not None and got.version == written.version

    with pytest.raises(OSError, match="reset"):
        _increment(objects, resolve=lambda: None)
