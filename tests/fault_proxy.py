"""A fault proxy in front of the S3 server for scenario tests: one per process under test
(that process's storage option ``aws_endpoint`` is the proxy's endpoint), controlled
by the test from its own process.

    proxy = FaultProxy(moto_s3.endpoint)
    rule = proxy.add_rule(method="PUT", path=r"/segments/p-0/\\d+\\.meta$", action="hold",
                          hold_later=True)
    ...                   # the process under test blocks in the held request
    rule.wait_hit(10)     # it arrived
    ...                   # another process takes the lease over meanwhile
    proxy.release()       # the held requests reach the server late, in arrival order

A rule matches a request by method (None: any), by ``re.search`` of ``path`` in the
request's path, percent-decoded, query included (``/qbucket/<prefix>/partitions/p-0/
MANIFEST``; a listing is ``/qbucket?list-type=2&prefix=...``; a bulk delete ``POST
/qbucket?delete``) and optionally of ``body`` in its body. It applies to the next
``times`` matching requests (None: every one); the first rule that matches wins.
Actions:

- ``hold``: the request is accepted but not forwarded until :meth:`FaultProxy.release`;
  with ``hold_later`` (or after :meth:`FaultProxy.hold_all`) every later request of the
  process is held too. Released requests are forwarded one at a time in arrival order,
  whether or not the client still waits for them: a paused process's (a long GC, a
  network partition) requests landing after its lease moved.
- ``503``: answered ``503 SlowDown`` (an S3 XML error) without forwarding.
- ``drop_response``: forwarded; once the server answered, the connection is closed
  without an answer (the write landed, its answer was lost).

Every request is logged (:attr:`FaultProxy.log`: method, path, status, what was done to
it) for assertions and failure messages. Every wait is bounded: a request held for
:data:`HOLD_LIMIT_S` without a release is dropped unforwarded, and each ``wait`` takes
a timeout. The proxy listens on 127.0.0.1 only (:class:`~tests.moto_server.ForwardingProxy`).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message

import pytest

from tests.moto_server import ForwardingProxy, MotoS3, Reply

ACTIONS = ("hold", "503", "drop_response")

HOLD_LIMIT_S = 120.0
"""The longest a request stays held without a release: then it is dropped, never forwarded."""

SLOW_DOWN = Reply(
    503,
    [("Content-Type", "application/xml")],
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>fault-proxy</RequestId></Error>",
)


@dataclass
class Seen:
    """One request the proxy received, and what became of it."""

    method: str
    path: str
    """Percent-decoded, query included."""
    arrived: float
    action: str = ""
    """The action of the rule that matched it, if one did."""
    held: bool = False
    """Held until a release (by its rule, ``hold_later`` or :meth:`FaultProxy.hold_all`)."""
    status: int | None = None
    """The server's answer (503 when answered here); None while held or when never sent."""
    answered: bool = False
    """Whether the client was sent an answer."""
    late: bool = False
    """Forwarded after a release."""
    body: bytes = b""
    """The request's body when it is a ``POST`` (a bulk delete's keys), else empty."""

    def deleted_keys(self) -> list[str]:
        """The keys a bulk delete (``POST ?delete``) names."""
        if self.method != "POST" or "?delete" not in self.path:
            return []
        return [
            urllib.parse.unquote(k) for k in re.findall(r"<Key>([^<]*)</Key>", self.body.decode())
        ]

    def __str__(self) -> str:
        status = "held" if self.held and not self.late else self.status
        notes = [n for n, on in (("late", self.late), ("unanswered", not self.answered)) if on]
        what = f" [{self.action}]" if self.action else ""
        extra = f" ({', '.join(notes)})" if notes and self.status is not None else ""
        return f"{self.method} {self.path} -> {status}{what}{extra}"


@dataclass
class Rule:
    """What to do to the requests that match; see the module docstring."""

    proxy: FaultProxy
    method: str | None
    path: re.Pattern[str] | None
    action: str
    times: int | None
    hold_later: bool
    body: re.Pattern[bytes] | None = None
    hits: list[Seen] = field(default_factory=list)
    _hit: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str, body: bytes) -> bool:
        if self.times is not None and len(self.hits) >= self.times:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.body is not None and self.body.search(body) is None:
            return False
        return self.path is None or self.path.search(path) is not None

    def wait_hit(self, timeout: float) -> Seen:
        """The first request the rule matched, once it arrived (``TimeoutError`` naming
        every request the proxy saw when none did within ``timeout`` seconds)."""
        if not self._hit.wait(timeout):
            raise TimeoutError(
                f"no request matched {self} within {timeout:g}s; the proxy saw:\n"
                + self.proxy.describe()
            )
        return self.hits[0]

    def __str__(self) -> str:
        pattern = self.path.pattern if self.path is not None else "any path"
        return f"rule {self.method or 'any method'} {pattern!r} -> {self.action}"


class FaultProxy(ForwardingProxy):
    """A :class:`~tests.moto_server.ForwardingProxy` that holds, fails or loses the
    answer of the requests its rules pick (see the module docstring)."""

    def __init__(self, target: str) -> None:
        self._cv = threading.Condition()
        self.rules: list[Rule] = []
        self.log: list[Seen] = []
        self._holding = False
        self._generation = 0  # one more per release
        self._issued = 0  # tickets of held requests, in arrival order
        self._done: set[int] = set()  # tickets forwarded (or given up)
        self._turn = 0  # the lowest ticket not done
        self._closing = False
        super().__init__(target)
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    # -- control -------------------------------------------------------------------------
    def add_rule(
        self,
        method: str | None = None,
        path: str | None = None,
        action: str = "hold",
        times: int | None = 1,
        *,
        hold_later: bool = False,
        body: str | None = None,
    ) -> Rule:
        """A rule for the next ``times`` requests matching ``method``, ``path`` and
        (``re.search``, when given) ``body`` in the request's body (a bulk delete's
        ``POST ?delete`` names its keys there); ``hold_later`` (action ``hold``): every
        request after the first match is held too."""
        if action not in ACTIONS:
            raise ValueError(f"action {action!r}: one of {', '.join(ACTIONS)}")
        if hold_later and action != "hold":
            raise ValueError("hold_later goes with action 'hold'")
        rule = Rule(
            self,
            method.upper() if method else None,
            re.compile(path) if path is not None else None,
            action,
            times,
            hold_later,
            re.compile(body.encode()) if body is not None else None,
        )
        with self._cv:
            self.rules.append(rule)
        return rule

    def hold_all(self) -> None:
        """Hold every request from now on, until :meth:`release`."""
        with self._cv:
            self._holding = True

    def release(self, timeout: float = 30.0) -> list[Seen]:
        """Stop holding and forward every held request, one at a time in arrival order;
        returns them once all were forwarded (``TimeoutError`` after ``timeout`` s)."""
        with self._cv:
            self._holding = False
            self._generation += 1
            upto = self._issued
            released = [s for s in self.log if s.held and not s.late]
            self._cv.notify_all()
            if not self._cv.wait_for(lambda: self._turn >= upto, timeout):
                raise TimeoutError(
                    f"the held requests were not all forwarded within {timeout:g}s:\n"
                    + self.describe()
                )
        return released

    def held(self) -> list[Seen]:
        """The requests held now."""
        with self._cv:
            return [s for s in self.log if s.held and not s.late]

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        """The requests seen so far of ``method`` whose path ``path`` is found in."""
        pattern = re.compile(path) if path is not None else None
        with self._cv:
            return [
                s
                for s in self.log
                if (method is None or s.method == method.upper())
                and (pattern is None or pattern.search(s.path))
            ]

    def deleted(self) -> list[str]:
        """Every key the process asked the server to delete (``DELETE`` or bulk), in
        order, with the bucket name first (``qbucket/<prefix>/segments/...``)."""
        with self._cv:
            seen = list(self.log)
        out: list[str] = []
        for s in seen:
            if s.method == "DELETE":
                out.append(s.path.split("?", 1)[0].lstrip("/"))
            out += [f"{s.path.lstrip('/').split('?', 1)[0]}/{k}" for k in s.deleted_keys()]
        return out

    def describe(self, last: int = 60) -> str:
        """The last ``last`` requests, one a line (for failure messages)."""
        with self._cv:
            lines = [str(s) for s in self.log[-last:]]
        skipped = max(0, len(self.log) - last)
        return "\n".join(([f"... {skipped} earlier"] if skipped else []) + lines) or "(none)"

    def close(self) -> None:
        """Drop every held request unforwarded and stop."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        super().close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request -----------------------------------------------------------------------
    def exchange(self, method: str, path: str, headers: Message, body: bytes) -> Reply | None:
        shown = urllib.parse.unquote(path)
        with self._cv:
            seen = Seen(method, shown, time.monotonic(), body=body if method == "POST" else b"")
            self.log.append(seen)
            rule = next((r for r in self.rules if r.matches(method, shown, body)), None)
            if rule is not None:
                rule.hits.append(seen)
                seen.action = rule.action
            hold = self._holding or (rule is not None and rule.action == "hold")
            if hold:
                seen.held = True
                ticket, generation = self._issued, self._generation
                self._issued += 1
                if rule is not None and rule.hold_later:
                    self._holding = True
            if rule is not None:
                rule._hit.set()
        if hold:
            return self._late(seen, ticket, generation, method, path, headers, body)
        return self._answer(seen, method, path, headers, body)

    def _late(
        self,
        seen: Seen,
        ticket: int,
        generation: int,
        method: str,
        path: str,
        headers: Message,
        body: bytes,
    ) -> Reply | None:
        """A held request: forwarded once released and every earlier held one is."""
        try:
            with self._cv:
                released = self._cv.wait_for(
                    lambda: (
                        self._closing or (self._generation > generation and self._turn == ticket)
                    ),
                    HOLD_LIMIT_S,
                )
                if not released or self._closing:
                    return None
                seen.late = True
            return self._answer(seen, method, path, headers, body)
        finally:
            with self._cv:
                self._done.add(ticket)
                while self._turn in self._done:
                    self._turn += 1
                self._cv.notify_all()

    def _answer(
        self, seen: Seen, method: str, path: str, headers: Message, body: bytes
    ) -> Reply | None:
        if seen.action == "503":
            seen.status, seen.answered = SLOW_DOWN.status, True
            return SLOW_DOWN
        try:
            reply = self.send(method, path, headers, body)
        except OSError:
            return None  # the server could not be reached: the client sees a dropped connection
        seen.status = reply.status
        if seen.action == "drop_response":
            return None
        seen.answered = True
        return reply


@pytest.fixture
def fault_proxies(moto_s3: MotoS3) -> Iterator[Callable[[], FaultProxy]]:
    """Makes fault proxies in front of the session's moto server; all closed after the
    test (a test module imports ``moto_s3`` and this fixture)."""
    made: list[FaultProxy] = []

    def new() -> FaultProxy:
        made.append(FaultProxy(moto_s3.endpoint))
        return made[-1]

    yield new
    for proxy in made:
        with contextlib.suppress(OSError):
            proxy.close()
