"""A process of its own that the test drives one call at a time: a writer, a consumer,
a successor on "another machine", whose calls may block in a request a fault proxy
holds while the test goes on.

    z = Driven("writer Z")
    z.run("store = QuiverStore.open(root, config, storage_options=opts)", root=..., ...)
    pending = z.start("store.finalize()")   # blocks in a held request
    ...
    pending.result(10)                      # its value, or ChildRaised

Each call is Python source run in the process's one namespace (which starts with
``from quiver_spark import *``-like imports, see :data:`PRELUDE`): an expression's value
is returned, a block's ``result`` variable. Values cross as JSON (anything else by
``repr``). Calls run in order; :meth:`Driven.start` returns at once, so a call may be
waited for while the test does other things. Every wait is bounded; :meth:`Driven.close`
ends the process (killing it by its pid when it does not exit).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
from typing import Any

PRELUDE = """
import json, os, time
import pyarrow as pa
from quiver_spark import QuiverStore, StoreConfig, SegmentConfig, WalConfig
from quiver_spark.errors import LeaseLostError, LeaseHeldError, QuiverError
from quiver_spark.subscription import Subscription
"""

_LOOP = r"""
import json, sys, traceback
_out = sys.stdout
sys.stdout = sys.stderr  # what the calls print goes to the log, never into replies
_ns = {"__name__": "__driven__"}
exec(compile(sys.argv[1], "<prelude>", "exec"), _ns)
for _line in sys.stdin:
    _req = json.loads(_line)
    _ns.update(_req["names"])
    _ns["result"] = None
    try:
        try:
            _code = compile(_req["code"], "<call>", "eval")
        except SyntaxError:
            exec(compile(_req["code"], "<call>", "exec"), _ns)
            _value = _ns.get("result")
        else:
            _value = eval(_code, _ns)
        _reply = {"ok": _value}
    except BaseException as _e:
        _reply = {
            "error": type(_e).__name__,
            "bases": [c.__name__ for c in type(_e).__mro__],
            "message": str(_e),
            "traceback": traceback.format_exc(),
        }
    _out.write(json.dumps(_reply, default=repr) + "\n")
    _out.flush()
"""


class ChildRaised(Exception):
    """A call raised in the driven process: ``kind`` is its exception's class name,
    ``bases`` those of its class's MRO."""

    def __init__(self, name: str, kind: str, bases: list[str], message: str, tb: str) -> None:
        super().__init__(f"{name}: {kind}: {message}\n{tb}")
        self.kind = kind
        self.bases = bases
        self.message = message

    def is_a(self, kind: str) -> bool:
        return kind in self.bases


class Pending:
    """A call sent to the process; :meth:`result` waits for its reply."""

    def __init__(self, proc: Driven, code: str) -> None:
        self._proc = proc
        self.code = code
        self._reply: dict[str, Any] | None = None

    def done(self, timeout: float = 0.0) -> bool:
        """True once the reply came (waiting up to ``timeout`` seconds)."""
        self._proc._collect(self, timeout)
        return self._reply is not None

    def result(self, timeout: float) -> Any:
        """The call's value; :class:`ChildRaised` when it raised; ``TimeoutError`` (with
        the process's log) when no reply came within ``timeout`` seconds."""
        if not self.done(timeout):
            raise TimeoutError(
                f"{self._proc.name}: no reply to {self.code!r} within {timeout:g}s\n"
                + self._proc.log_tail()
            )
        reply = self._reply
        assert reply is not None
        if "error" in reply:
            raise ChildRaised(
                self._proc.name,
                reply["error"],
                reply["bases"],
                reply["message"],
                reply["traceback"],
            )
        return reply["ok"]

    def outcome(self, timeout: float) -> Any:
        """The call's value, or the :class:`ChildRaised` it raised (returned)."""
        try:
            return self.result(timeout)
        except ChildRaised as e:
            return e


class Driven:
    """A fresh interpreter of this virtualenv driven by calls (see the module docstring);
    ``env`` is added to its environment."""

    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self._log = tempfile.NamedTemporaryFile(prefix="driven-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LOOP, PRELUDE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._waiting: list[Pending] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(None)  # the process ended

    def _collect(self, pending: Pending, timeout: float) -> None:
        """Hand the replies that came to the calls, in order, until ``pending`` has one."""
        with self._lock:
            while pending._reply is None:
                try:
                    reply = self._replies.get(timeout=timeout)
                except queue.Empty:
                    return
                if reply is None:
                    self._replies.put(None)
                    code = self.proc.poll()
                    raise RuntimeError(
                        f"{self.name} ended (exit {code}) before answering {pending.code!r}\n"
                        + self.log_tail()
                    )
                self._waiting.pop(0)._reply = reply

    def start(self, code: str, **names: Any) -> Pending:
        """Send a call (``names`` are assigned in the namespace first, as JSON values)."""
        assert self.proc.stdin is not None
        pending = Pending(self, textwrap.dedent(code).strip())
        with self._lock:
            self._waiting.append(pending)
            self.proc.stdin.write(json.dumps({"code": pending.code, "names": names}) + "\n")
            self.proc.stdin.flush()
        return pending

    def run(self, code: str, timeout: float = 60.0, **names: Any) -> Any:
        """A call, waited for (see :meth:`Pending.result`)."""
        return self.start(code, **names).result(timeout)

    def log_tail(self, lines: int = 40) -> str:
        """The end of what the process wrote to stderr (its logs, its prints)."""
        try:
            with open(self._log.name, encoding="utf-8", errors="replace") as f:
                text = f.read().splitlines()[-lines:]
        except OSError:
            return ""
        return f"--- {self.name} log ---\n" + "\n".join(text)

    def close(self, timeout: float = 10.0) -> None:
        """End the process: its input is closed; killed when it has not exited in time."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass
