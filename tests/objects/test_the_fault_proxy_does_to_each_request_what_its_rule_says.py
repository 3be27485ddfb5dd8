"""The scenario tests' fault proxy (``tests/fault_proxy.py``) in front of moto, seen by
an object root's client (``CloudObjects`` over ``s3://``): a held request reaches the
server only once released, late and in arrival order; a ``503`` is answered without
reaching it; a dropped response is a write that landed whose answer was lost."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from quiver_spark.errors import ObjectExists
from quiver_spark.objects import ObjectStore, open_objects
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, s3_options, unique_prefix

__all__ = ["fault_proxies", "moto_s3"]


class Call:
    """``fn()`` on a thread of its own (a process blocked in a request)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:
            self.error = e

    def done(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


@pytest.fixture
def roots(
    moto_s3: MotoS3, fault_proxies: Callable[[], FaultProxy]
) -> tuple[FaultProxy, ObjectStore, ObjectStore]:
    """(proxy, the root through it, the same root reached directly)."""
    proxy = fault_proxies()
    url = f"{moto_s3.url}/{unique_prefix('proxy')}"
    return proxy, open_objects(url, s3_options(proxy.endpoint)), open_objects(url, moto_s3.options)


def test_a_held_write_lands_only_once_released(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    assert proxy.endpoint.startswith("http://127.0.0.1:")
    rule = proxy.add_rule(method="PUT", path=r"/LEASE$", action="hold")
    call = Call(lambda: through.create("LEASE", b"epoch-1"))
    seen = rule.wait_hit(10)
    assert not call.done(0.5), "the client got an answer to a held request"
    assert direct.get("LEASE") is None  # accepted by the proxy, not forwarded
    assert through.get("OTHER") is None  # the rule held one request, not the next
    assert [str(s) for s in proxy.held()] == [str(seen)]

    released = proxy.release()
    assert [s.path for s in released] == [seen.path]
    assert call.done(10) and call.error is None, call.error
    got = direct.get("LEASE")
    assert got is not None and got.data == b"epoch-1" and got.version == call.value
    assert seen.status == 200 and seen.late and seen.answered


def test_held_requests_are_forwarded_in_arrival_order_after_the_release(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    first = proxy.add_rule(method="PUT", path=r"/NOTE$", action="hold", hold_later=True)
    calls = [Call(lambda: through.put("NOTE", b"first"))]
    first.wait_hit(10)
    for held, data in enumerate((b"second", b"third"), start=2):  # held by hold_later
        calls.append(Call(functools.partial(through.put, "NOTE", data)))
        assert _until(lambda: len(proxy.held()) == held), proxy.describe()  # noqa: B023
    assert direct.get("NOTE") is None

    assert len(proxy.release()) == 3
    assert all(c.done(10) and c.error is None for c in calls), [c.error for c in calls]
    got = direct.get("NOTE")
    assert got is not None and got.data == b"third", proxy.describe()  # the last one to arrive
    assert [s.status for s in proxy.requests("PUT", r"/NOTE$")] == [200, 200, 200]
    assert through.get("NOTE") is not None  # after the release nothing is held


def test_hold_all_holds_every_later_request_until_the_release(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    direct.create("A", b"a")
    proxy.hold_all()
    call = Call(lambda: through.get("A"))
    assert _until(lambda: len(proxy.held()) == 1), proxy.describe()
    assert not call.done(0.3)
    proxy.release()
    assert call.done(10) and call.error is None
    assert call.value is not None and call.value.data == b"a"


def test_a_503_is_answered_without_reaching_the_server(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    proxy.add_rule(method="PUT", path=r"/STORE$", action="503")
    assert through.create("STORE", b"s")  # the store retries a conditional write itself
    # the retry created the key (200, not 412): the 503 never reached the server
    assert [s.status for s in proxy.requests("PUT", r"/STORE$")] == [503, 200]
    got = direct.get("STORE")
    assert got is not None and got.data == b"s"


def test_a_read_answered_503_once_is_retried_by_the_client(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    direct.create("R", b"r")
    rule = proxy.add_rule(method="GET", path=r"/R$", action="503")
    got = through.get("R")
    assert got is not None and got.data == b"r"
    assert rule.hits and [s.status for s in proxy.requests("GET", r"/R$")] == [503, 200]


def test_a_dropped_response_is_a_write_that_landed_without_an_answer(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, direct = roots
    rule = proxy.add_rule(method="PUT", path=r"/commits/", action="drop_response")
    version = through.create("commits/app/1.commit", b"decided")  # retried, read back
    got = direct.get("commits/app/1.commit")
    assert got is not None and (got.data, got.version) == (b"decided", version)
    assert rule.hits[0].status == 200 and not rule.hits[0].answered
    retry = proxy.requests("PUT", r"/commits/")[1]  # the rule was used up: answered
    assert (retry.status, retry.answered) == (412, True)
    with pytest.raises(ObjectExists):
        through.create("commits/app/1.commit", b"other")


def test_waiting_for_a_request_that_never_comes_times_out_naming_what_came(
    roots: tuple[FaultProxy, ObjectStore, ObjectStore],
) -> None:
    proxy, through, _ = roots
    through.get("SOMETHING")
    rule = proxy.add_rule(method="DELETE", path=r"/never$", action="hold")
    with pytest.raises(TimeoutError, match=r"(?s)DELETE.*never.*GET .*/SOMETHING -> 404"):
        rule.wait_hit(0.2)


def _until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    event = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if cond():
            return True
        event.wait(0.02)
    return cond()
