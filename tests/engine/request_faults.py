"""One object request that goes wrong, picked by its place in the requests a test makes
(the engine's tests on ``memory://`` roots): the first request ``target`` made while
the fault is armed, or the request right after it, fails before it happens (a 503: a
:class:`~quiver_spark.errors.RequestFailed`, as a cloud store raises it, nothing done),
succeeds with its answer lost (the same error, raised after it), or, a listing,
answers from the bucket as a snapshot saw it (a stale listing). Only the test's own
thread is faulted (a lease keeper renewing on its own thread is not the workload).

Every ``MemoryObjects`` a handle opens has faults of its own; the ``request_faults``
fixture of a module that imports :func:`request_faults` hooks them all at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from quiver_spark.errors import RequestFailed
from quiver_spark.objects.memory import MemoryObjects

FAULT_KINDS = ("fail", "lost", "stale")
POSITIONS = ("at", "next")


@dataclass
class RequestFault:
    """A fault of ``kind`` at the ``nth`` request ``target`` (``(op, key)``) or at the
    request after it (``position``), armed while :attr:`armed`; ``snapshot`` answers a
    stale listing."""

    target: tuple[str, str]
    kind: str
    position: str
    nth: int = 1
    """Which request ``target`` of the armed span is meant (1: the first)."""
    snapshot: dict[str, tuple[bytes, str]] | None = None
    armed: bool = False
    fired: tuple[str, str] | None = None
    """The request it hit (None: it never did)."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    """Every request made while armed (for the message of a fault that never fired)."""
    _seen_target: int = 0
    _lost: tuple[MemoryObjects, str, str] | None = None
    _stale: tuple[MemoryObjects, dict[str, tuple[bytes, str]] | None] | None = None

    def _hit(self, op: str, key: str) -> bool:
        if self.fired is not None:
            return False
        if self._seen_target == self.nth:  # the request right after the target
            return True
        if (op, key) == self.target:
            self._seen_target += 1
            return self._seen_target == self.nth and self.position == "at"
        return False

    def _unstale(self) -> None:
        if self._stale is not None:
            store, was = self._stale
            store.faults.stale_list = was
            self._stale = None

    def before(self, store: MemoryObjects, op: str, key: str) -> None:
        self._unstale()
        if not self.armed or threading.current_thread() is not threading.main_thread():
            return
        self.requests.append((op, key))
        if not self._hit(op, key):
            return
        self.fired = (op, key)
        if self.kind == "fail":
            raise RequestFailed(op, key, f"{op} {key}: 503 Slow Down (injected, nothing done)")
        if self.kind == "lost":
            self._lost = (store, op, key)
        elif self.kind == "stale":
            assert op == "list", f"a stale answer asked of a {op}"
            self._stale = (store, store.faults.stale_list)
            store.faults.stale_list = self.snapshot

    def after(self, store: MemoryObjects, op: str, key: str) -> None:
        self._unstale()
        if self._lost is not None and self._lost == (store, op, key):
            self._lost = None
            raise RequestFailed(op, key, f"{op} {key}: connection reset, answer lost (injected)")


def request_faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RequestFault]]:
    """The body of a fixture: the faults the test appends apply to every
    ``MemoryObjects`` (each handle opens its own)."""
    armed: list[RequestFault] = []
    real_before, real_after = MemoryObjects._before, MemoryObjects._after

    def before(self: MemoryObjects, op: str, key: str) -> None:
        for f in armed:
            f.before(self, op, key)
        real_before(self, op, key)

    def after(self: MemoryObjects, op: str, key: str) -> None:
        real_after(self, op, key)
        for f in armed:
            f.after(self, op, key)

    monkeypatch.setattr(MemoryObjects, "_before", before)
    monkeypatch.setattr(MemoryObjects, "_after", after)
    yield armed
    armed.clear()


def names_the_request(e: BaseException, fault: RequestFault) -> bool:
    """Whether error ``e`` (or what it was raised from) names the object the fault hit."""
    assert fault.fired is not None
    key = fault.fired[1]
    chain: BaseException | None = e
    while chain is not None:
        if key in str(chain):
            return True
        chain = chain.__cause__ or chain.__context__
    return False
