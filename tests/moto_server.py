"""An S3 endpoint for tests: ``moto_server`` in a subprocess, started once per session.

A conftest makes the fixture available with ``from tests.moto_server import moto_s3``;
a test then opens ``f"{moto_s3.url}/{unique_prefix()}"`` with ``moto_s3.options`` so
tests sharing the bucket never see each other's keys. :func:`moto_server` is the same
server as a context manager (the benches start theirs with it). :class:`LossyProxy` sits
between a client and the server and drops the response of chosen requests after the
server has carried them out (a success whose answer was lost); both it and the benches'
counting proxy are a :class:`ForwardingProxy`.
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


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A running moto S3 server with bucket ``qbucket``; stopped at the end of the session."""
    with moto_server() as endpoint:
        yield MotoS3(endpoint, f"s3://{BUCKET}", s3_options(endpoint))


class ForwardingProxy:
    """An HTTP proxy on 127.0.0.1 to ``target``: every request is forwarded and its
    answer copied back once :meth:`answered` saw it. :meth:`answered` returning True
    loses the answer (the connection is closed after the target carried the request
    out); :meth:`intercept` returning True answers 204 here without forwarding."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                if proxy.intercept(self.path):
                    self.send_response(204)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{host}:{port}"
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                if proxy.answered(self.command, self.path, self.headers, resp.status):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

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
