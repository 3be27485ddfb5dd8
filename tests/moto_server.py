"""An S3 endpoint for tests: ``moto_server`` in a subprocess, started once per session.

A conftest makes the fixture available with ``from tests.moto_server import moto_s3``;
a test then opens ``f"{moto_s3.url}/{unique_prefix()}"`` with ``moto_s3.options`` so
tests sharing the bucket never see each other's keys. :func:`moto_server` is the same
server as a context manager (the benches start theirs with it). :class:`LossyProxy` sits
between a client and the server and drops the response of chosen requests after the
server has carried them out (a success whose answer was lost); it, the benches'
counting proxy and the scenario tests' fault proxy (``tests/fault_proxy.py``) are a
:class:`ForwardingProxy`.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

BUCKET = "qbucket"
ACCESS_KEY_ID = "AKIAMOTOTESTKEY12345"
SECRET = "moto-test-secret-value-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_prefix(name: str = "t") -> str:
    """A key prefix no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


def s3_options(endpoint: str, **extra: object) -> dict[str, object]:
    """Storage options that reach an S3 endpoint over plain HTTP."""
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET,
        "aws_region": "us-east-1",
        "allow_http": "true",
        **extra,
    }


@dataclass(frozen=True)
class MotoS3:
    endpoint: str
    url: str
    """``s3://<bucket>``: append ``/<prefix>``."""
    options: dict[str, object] = field(default_factory=dict)


def _wait_until_up(endpoint: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not answer at {endpoint} within {timeout_s}s")


@contextlib.contextmanager
def moto_server(bucket: str = BUCKET) -> Iterator[str]:
    """``moto_server`` in a subprocess on a free loopback port with ``bucket`` created;
    yields its endpoint (``http://127.0.0.1:<port>``) and stops it after."""
    binary = Path(sys.executable).parent / "moto_server"
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    try:
        _wait_until_up(endpoint, proc)
        req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
        urllib.request.urlopen(req, timeout=10).read()
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _SharedServer:
    """The one ``moto_server`` process of a test process: started by the first
    :func:`moto_s3` set up, stopped when the last one is torn down."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self.endpoint = ""
        self.users = 0
        self.buckets = 0

    def enter(self) -> str:
        if self._stack is None:
            stack = contextlib.ExitStack()
            self.endpoint = stack.enter_context(moto_server())
            self._stack = stack
        self.users += 1
        return self.endpoint

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0 and self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()

    def new_bucket(self) -> str:
        """``qbucket`` the first time, then ``qbucket-1``, ``qbucket-2``, ... (created)."""
        name = BUCKET if self.buckets == 0 else f"{BUCKET}-{self.buckets}"
        self.buckets += 1
        if name != BUCKET:  # moto_server() made the first
            req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
            urllib.request.urlopen(req, timeout=10).read()
        return name


_shared = _SharedServer()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A running moto S3 server with an empty bucket; stopped at the end of the session.

    Each test module that imports the fixture has one of its own (set up once per
    session), with a bucket of its own (``qbucket`` for the first, as if its server
    were new); the modules share one ``moto_server`` process (a start costs a second or
    two under load)."""
    endpoint = _shared.enter()
    try:
        bucket = _shared.new_bucket()
        yield MotoS3(endpoint, f"s3://{bucket}", s3_options(endpoint))
    finally:
        _shared.leave()


@dataclass(frozen=True)
class Reply:
    """An HTTP answer a proxy sends back: status, headers (without framing) and body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


class ForwardingProxy:
    """An HTTP proxy on 127.0.0.1 to ``target``: every request is handed to
    :meth:`exchange`, which by default forwards it (:meth:`send`) and copies the answer
    back once :meth:`answered` saw it. :meth:`answered` returning True loses the answer
    (the connection is closed after the target carried the request out);
    :meth:`intercept` returning True answers 204 here without forwarding. A subclass may
    override :meth:`exchange` itself (hold a request, answer it, lose its answer)."""

    def __init__(self, target: str) -> None:
        self._host, port = target.removeprefix("http://").split(":")
        self._port = int(port)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = proxy.exchange(self.command, self.path, self.headers, body)
                if reply is None:  # the answer is lost: close without one
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(reply.status)
                for k, v in reply.headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = dict((k.lower(), v) for k, v in reply.headers).get("content-length")
                shown = length if self.command == "HEAD" and length else str(len(reply.body))
                self.send_header("Content-Length", shown)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def send(self, method: str, path: str, headers: Message, body: bytes) -> Reply:
        """Forward one request to the target and return its answer."""
        fwd = {k: v for k, v in headers.items() if k.lower() != "host"}
        fwd["Host"] = f"{self._host}:{self._port}"
        conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=fwd)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        return Reply(resp.status, resp.getheaders(), data)

    def exchange(self, method: str, path: str, headers: Message, body: bytes) -> Reply | None:
        """The answer to one request; None loses it (the connection is closed)."""
        if self.intercept(path):
            return Reply(204, [], b"")
        reply = self.send(method, path, headers, body)
        if self.answered(method, path, headers, reply.status):
            return None
        return reply

    def intercept(self, path: str) -> bool:
        """True when the request for ``path`` is answered here (nothing forwarded)."""
        return False

    def answered(self, method: str, path: str, headers: Message, status: int) -> bool:
        """Called once the target answered ``status``; True loses the answer."""
        return False

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class LossyProxy(ForwardingProxy):
    """Forwards every request to ``target`` and, for the ones
    ``lose(method, path, headers)`` picks, closes the connection instead of answering
    (after the target carried the request out). ``seen`` records every request."""

    def __init__(self, target: str, lose: Callable[[str, str, dict[str, str]], bool]) -> None:
        self.lose = lose
        self.seen: list[tuple[str, str, bool]] = []
        super().__init__(target)

    def answered(self, method: str, path: str, headers: Message, status: int) -> bool:
        lost = self.lose(method, path, dict(headers.items()))
        self.seen.append((method, path, lost))
        return lost
