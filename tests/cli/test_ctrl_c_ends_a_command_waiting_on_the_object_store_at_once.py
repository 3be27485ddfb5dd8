"""Ctrl-C ends a ``quiver`` command at once, even while it waits in a request to an
object store that never answers: exit 130, ``Interrupted.`` as stderr's last line,
within a couple of seconds of the signal, not after the request's retry budget
(``storage.retry_timeout``, 60 s by default).

The endpoint accepts every connection and reads the request, then never answers (an
S3 gateway that hangs): obstore's blocking call does not return to Python until its
budget runs out, so Python's own Ctrl-C handling cannot run meanwhile. Each command
is a real ``quiver`` process sent a real SIGINT once its request has arrived.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.moto_server import s3_options, unique_prefix

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 5.0
"""How long after the signal the command may take to end: generous for a loaded 2-core
machine (it ends in about half a second); the retry budget is 60 s."""


class SilentEndpoint:
    """Accepts every connection and reads what is sent, never answering."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requested = threading.Event()
        """Set once a request's first bytes arrived."""
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._open.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            self.requested.set()

    def close(self) -> None:
        self._stop.set()
        for conn in self._open:
            conn.close()
        self._listener.close()


@pytest.fixture
def silent() -> Iterator[SilentEndpoint]:
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.close()


def quiver(args: list[str]) -> subprocess.Popen[str]:
    """A real ``quiver`` process (no AWS_* variable of this machine reaches it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "quiver_spark.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


COMMANDS = {
    "status": ["status", "{url}"],
    "fsck": ["fsck", "{url}"],
    "gc": ["gc", "{url}"],
    "subscribers add --create": ["subscribers", "{url}", "add", "s", "--create"],
    "subscribers remove": ["subscribers", "{url}", "remove", "s"],
    "txns list": ["txns", "{url}", "list"],
    "config set": ["config", "{url}", "set", "retention.max_age=2h"],
    "metrics": ["metrics", "{url}"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_ctrl_c_mid_request_exits_130_with_one_line_within_seconds(
    command: str, silent: SilentEndpoint
) -> None:
    url = f"s3://qbucket/{unique_prefix('ctrl-c')}"
    flags = [a for k, v in s3_options(silent.endpoint).items() for a in ("-S", f"{k}={v}")]
    proc = quiver([a.format(url=url) for a in COMMANDS[command]] + flags)
    try:
        assert silent.requested.wait(60), "the command never sent a request"
        time.sleep(0.2)  # well inside the request: obstore waits for its answer
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        try:
            _out, err = proc.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} still ran {BOUND_S:g}s after Ctrl-C (it waits out the request)")
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.splitlines()[-1] == "Interrupted.", err
    assert err.count("Interrupted.") == 1 and "Traceback" not in err, err
    assert took < BOUND_S, took
