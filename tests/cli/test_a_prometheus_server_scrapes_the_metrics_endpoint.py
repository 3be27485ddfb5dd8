"""A real Prometheus server scrapes ``quiver metrics PATH --serve`` and stores its
series: the store's gauges and a subscriber's lag are queryable from Prometheus's own
API, with the labels the endpoint gave them.

Needs the ``prometheus`` binary (Debian: ``apt-get install prometheus``); without it
the test says so and is skipped (the endpoint's text is checked by Prometheus's own
text-format parser in ``test_metrics_are_served_for_prometheus_to_scrape.py`` either
way)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .conftest import Built
from .test_metrics_are_served_for_prometheus_to_scrape import _serve, _stop

PROMETHEUS = shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(base: str, expr: str) -> list[dict[str, object]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (apt-get install prometheus)")
def test_prometheus_scrapes_the_store_series(built: Built, tmp_path: Path) -> None:
    proc, url = _serve(built.root, "--interval", "0s")
    target = urllib.parse.urlsplit(url).netloc
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: quiver\n    static_configs:\n      - targets: ['{target}']\n"
    )
    assert PROMETHEUS is not None
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        segments: list[dict[str, object]] = []
        lag: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            try:
                segments = _query(base, 'quiver_partition_segments{partition="p-0"}')
                lag = _query(base, 'quiver_subscriber_lag_segments{subscriber="slow"}')
            except OSError:
                segments = lag = []  # not listening yet
            if segments and lag:
                break
            time.sleep(0.5)
        assert segments, "Prometheus never stored quiver_partition_segments"
        assert segments[0]["value"][1] == "3"  # type: ignore[index]
        assert segments[0]["metric"]["job"] == "quiver"  # type: ignore[index]
        assert lag and lag[0]["value"][1] == "4"  # type: ignore[index]
        up = _query(base, 'up{job="quiver"}')
        assert up and up[0]["value"][1] == "1"  # type: ignore[index]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        code, _ = _stop(proc)
    assert code == 130
