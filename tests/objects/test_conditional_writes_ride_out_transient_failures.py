"""The one retry of conditional writes (quiver_spark/objects/retry.py, ARCHITECTURE.md
§2.2), driven through the in-process store's fault hooks and a fake clock: a transient
failure is retried with the same bytes, an unknown outcome is resolved by reading the
key back, a refused first attempt is raised at once, and only a decided outcome or the
budget running out reaches the caller. (memory:// roots themselves report each failure
as it happens: the engine's own fault tests use them for that.)"""

from __future__ import annotations

import errno
import uuid
from collections.abc import Callable

import pytest

from quiver_spark.errors import (
    ObjectConflict,
    ObjectExists,
    RequestRejected,
    RetriesExhausted,
    VersionMismatch,
)
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.objects.retry import RetryBudget, transient, write_conditionally


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.pauses.append(s)
        self.now += s


def budget(clock: FakeClock, timeout_s: float = 60.0, jitter: float = 1.0) -> RetryBudget:
    return RetryBudget(timeout_s=timeout_s, clock=clock, sleep=clock.sleep, jitter=lambda: jitter)


def store() -> MemoryObjects:
    return MemoryObjects(f"retry-{uuid.uuid4().hex}", "root")


class Script:
    """Fault hooks failing the first requests of ``op`` as listed: ``"fail"`` before it
    happens, ``"lose"`` after it happened (its answer lost), ``"409"``, ``"refuse"``
    (a 4xx), ``"deny"`` (403); ``also`` runs once before the attempt numbered
    ``also_at`` (another process's write between two attempts)."""

    def __init__(
        self,
        objects: MemoryObjects,
        op: str,
        plan: list[str],
        also: Callable[[], None] | None = None,
        also_at: int = 2,
    ) -> None:
        self.op, self.plan, self.also, self.also_at = op, list(plan), also, also_at
        self.attempts = 0
        self._lose = False
        objects.faults.before = self.before
        objects.faults.after = self.after

    def before(self, op: str, key: str) -> None:
        if op != self.op:
            return
        self.attempts += 1
        if self.also is not None and self.attempts == self.also_at:
            also, self.also = self.also, None
            also()
        step = self.plan.pop(0) if self.plan else "ok"
        if step == "fail":
            raise OSError(errno.ECONNRESET, f"503 SlowDown on {key}")
        if step == "409":
            raise ObjectConflict(key, f"409 ConditionalRequestConflict on {key}")
        if step == "refuse":
            raise RequestRejected(key, f"400 Bad Request on {key}")
        if step == "deny":
            raise PermissionError(f"403 on {key}")
        self._lose = step == "lose"

    def after(self, op: str, key: str) -> None:
        if op == self.op and self._lose:
            self._lose = False
            raise TimeoutError(f"the answer to {op} {key} was lost")


def create(objects: MemoryObjects, key: str, data: bytes, b: RetryBudget) -> str:
    return write_conditionally(
        "create",
        objects.display(key),
        data,
        lambda: objects.create(key, data),
        lambda: objects.get(key),
        b,
    )


def replace(objects: MemoryObjects, key: str, data: bytes, version: str, b: RetryBudget) -> str:
    return write_conditionally(
        "replace",
        objects.display(key),
        data,
        lambda: objects.replace(key, data, version=version),
        lambda: objects.get(key),
        b,
    )


def write(op: str, objects: MemoryObjects, data: bytes, b: RetryBudget) -> str:
    if op == "create":
        return create(objects, "k", data, b)
    return replace(objects, "k", data, objects.head("k") or "", b)


def prepared(op: str) -> MemoryObjects:
    objects = store()
    if op == "replace":
        objects.create("k", b"before")
    return objects


@pytest.mark.parametrize("op", ["create", "replace"])
@pytest.mark.parametrize("plan", [["fail"], ["409"], ["fail", "409", "fail"], ["lose"]])
def test_a_transient_failure_is_retried_and_the_bytes_land_once(op: str, plan: list[str]) -> None:
    objects = prepared(op)
    clock = FakeClock()
    script = Script(objects, op, plan)
    version = write(op, objects, b"mine", budget(clock))
    got = objects.get("k")
    assert got is not None and (got.data, got.version) == (b"mine", version)
    assert script.attempts == len(plan) + 1
    assert len(clock.pauses) == len(plan)


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_write_whose_answer_was_lost_is_found_by_reading_back(op: str) -> None:
    objects = prepared(op)
    Script(objects, op, ["lose", "fail", "lose"])
    version = write(op, objects, b"mine", budget(FakeClock()))
    got = objects.get("k")
    assert got is not None and (got.data, got.version) == (b"mine", version)


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_first_attempt_refused_by_its_condition_is_raised_at_once(op: str) -> None:
    objects = store()
    first = objects.create("k", b"theirs")
    if op == "replace":
        objects.replace("k", b"theirs again", version=first)
    clock = FakeClock()
    script = Script(objects, op, [])
    expected = ObjectExists if op == "create" else VersionMismatch
    with pytest.raises(expected):
        if op == "create":
            create(objects, "k", b"mine", budget(clock))
        else:
            replace(objects, "k", b"mine", first, budget(clock))
    assert script.attempts == 1 and clock.pauses == []


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_refusal_after_only_conflicts_is_raised_without_reading_back(op: str) -> None:
    objects = prepared(op)
    version = objects.head("k") or ""

    def theirs() -> None:
        if op == "create":
            objects.create("k", b"mine")  # the same bytes, but nothing of ours landed
        else:
            objects.replace("k", b"mine", version=version)

    Script(objects, op, ["409"], also=theirs)
    reads: list[str] = []
    expected = ObjectExists if op == "create" else VersionMismatch
    with pytest.raises(expected):
        write_conditionally(
            op,
            objects.display("k"),
            b"mine",
            (lambda: objects.create("k", b"mine"))
            if op == "create"
            else (lambda: objects.replace("k", b"mine", version=version)),
            lambda: reads.append("k") or objects.get("k"),  # type: ignore[func-returns-value]
            budget(FakeClock()),
        )
    assert reads == []


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_refusal_after_an_unknown_outcome_is_raised_when_the_key_holds_other_bytes(
    op: str,
) -> None:
    objects = prepared(op)
    version = objects.head("k") or ""

    def theirs() -> None:  # between our two attempts, another writer's write lands
        if op == "create":
            objects.create("k", b"theirs")
        else:
            objects.replace("k", b"theirs", version=version)

    Script(objects, op, ["fail"], also=theirs)
    expected = ObjectExists if op == "create" else VersionMismatch
    with pytest.raises(expected):
        if op == "create":
            create(objects, "k", b"mine", budget(FakeClock()))
        else:
            replace(objects, "k", b"mine", version, budget(FakeClock()))
    got = objects.get("k")
    assert got is not None and got.data == b"theirs"


def test_a_landed_write_replaced_since_by_another_is_reported_as_refused() -> None:
    objects = prepared("replace")
    version = objects.head("k") or ""

    def theirs() -> None:  # our lost write landed; another writer replaced it since
        got = objects.get("k")
        assert got is not None and got.data == b"mine"
        objects.replace("k", b"theirs", version=got.version)

    Script(objects, "replace", ["lose"], also=theirs)
    with pytest.raises(VersionMismatch):
        replace(objects, "k", b"mine", version, budget(FakeClock()))


@pytest.mark.parametrize("step", ["refuse", "deny"])
def test_a_request_the_storage_rejects_is_never_retried(step: str) -> None:
    objects = store()
    clock = FakeClock()
    script = Script(objects, "create", [step])
    with pytest.raises(RequestRejected if step == "refuse" else PermissionError):
        create(objects, "k", b"mine", budget(clock))
    assert script.attempts == 1 and clock.pauses == [] and objects.get("k") is None


def test_a_failing_read_back_keeps_the_outcome_unknown_and_is_retried() -> None:
    objects = store()
    Script(objects, "create", ["lose"])
    failed_reads = ["503"]

    def read() -> object:
        if failed_reads:
            failed_reads.pop()
            raise OSError(errno.ECONNRESET, "503 on the read back")
        return objects.get("k")

    version = write_conditionally(
        "create",
        objects.display("k"),
        b"mine",
        lambda: objects.create("k", b"mine"),
        read,  # type: ignore[arg-type]
        budget(FakeClock()),
    )
    assert objects.head("k") == version and failed_reads == []


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_storm_longer_than_the_budget_raises_naming_the_key_and_the_budget(op: str) -> None:
    objects = prepared(op)
    clock = FakeClock()
    script = Script(objects, op, ["fail"] * 10_000)
    with pytest.raises(RetriesExhausted) as caught:
        write(op, objects, b"mine", budget(clock, timeout_s=20.0))
    message = str(caught.value)
    assert objects.display("k") in message and "20s" in message
    assert "storage.retry_timeout" in message and "unknown" in message
    assert not caught.value.written_nothing
    assert clock.now < 20.0  # no attempt starts after the budget
    assert script.attempts == len(clock.pauses) + 1 > 5


def test_a_storm_of_conflicts_only_says_nothing_was_written() -> None:
    objects = store()
    Script(objects, "create", ["409"] * 10_000)
    with pytest.raises(RetriesExhausted) as caught:
        create(objects, "k", b"mine", budget(FakeClock(), timeout_s=5.0))
    assert caught.value.written_nothing and "nothing was written" in str(caught.value)
    assert objects.get("k") is None


def test_pauses_double_from_the_first_up_to_the_cap_and_are_jittered_below_it() -> None:
    b = RetryBudget(init_backoff_s=0.1, max_backoff_s=5.0, jitter=lambda: 1.0)
    assert [b.pause(n) for n in range(1, 9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    half = RetryBudget(jitter=lambda: 0.5)
    assert half.pause(3) == pytest.approx(0.2)
    assert RetryBudget().pause(10_000) <= 5.0


def test_only_failures_that_may_pass_are_transient() -> None:
    assert transient(OSError(errno.ECONNRESET, "reset"))
    assert transient(TimeoutError("timed out"))
    assert transient(ObjectConflict("k", "409"))
    for decided in (
        PermissionError("403"),
        FileNotFoundError("no bucket"),
        RequestRejected("k", "400"),
        RetriesExhausted("k", "spent", attempts=3),
        ObjectExists("k", "exists"),
        ValueError("not an I/O failure"),
    ):
        assert not transient(decided), decided
