"""``quiver metrics PATH --serve [HOST:]PORT`` answers Prometheus scrapes over HTTP with
the store's series (the same as ``quiver metrics PATH``), computes them at most once
per ``--interval`` however many scrapes come, and stops on Ctrl-C with exit 130.

Run as a real process; each scrape is an HTTP GET parsed by prometheus_client's
parser of the text format."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from quiver_spark.subscribers import Outcome, SubscriberRegistry

from .conftest import Built, run, write_segments

REPO = Path(__file__).resolve().parents[2]


def _serve(root: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiver_spark.cli", "metrics", str(root), "--serve", "127.0.0.1:0",
         *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/metrics)", line)
    assert found, f"no address announced: {line!r}"
    return proc, found.group(1)


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_a_scrape_reads_the_store_series_and_ctrl_c_stops_the_server(built: Built) -> None:
    proc, url = _serve(built.root, "--interval", "0s")
    try:
        got = _scrape(url)
        assert got[("quiver_partition_segments", (("partition", "p-0"),))] == 3.0
        assert got[("quiver_subscriber_lag_segments", (("subscriber", "slow"),))] == 4.0
        with SubscriberRegistry.open(str(built.root)) as reg:  # the store moves on
            reg.record("slow", "p-1", [1, 2, 3], Outcome.ACK)
        again = _scrape(url)
        assert again[("quiver_subscriber_lag_segments", (("subscriber", "slow"),))] == 1.0
        root_page = _scrape(url.replace("/metrics", "/"))  # `/` answers too
        assert root_page.keys() == again.keys()
        try:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=30)
            raise AssertionError("an unknown path was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        code, err = _stop(proc)
    assert code == 130, err
    assert "Interrupted." in err and "Traceback" not in err


def test_scrapes_within_the_interval_share_one_computation(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    proc, url = _serve(root, "--interval", "1h")
    try:
        first = _scrape(url)
        write_segments(root, "p-0", 2)  # not seen until the interval has passed
        assert _scrape(url) == first
        assert first[("quiver_partition_segments", (("partition", "p-0"),))] == 1.0
    finally:
        _stop(proc)
    proc, url = _serve(root, "--interval", "0s")
    try:
        assert _scrape(url)[("quiver_partition_segments", (("partition", "p-0"),))] == 3.0
    finally:
        _stop(proc)


def test_a_bad_address_or_flag_is_one_line_naming_what_is_allowed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    bad = run(["metrics", str(root), "--serve", "host:port"])
    assert bad.exit_code == 2 and "expected [HOST:]PORT" in bad.output
    both = run(["metrics", str(root), "--serve", "9464", "--json"])
    assert both.exit_code == 2 and "neither --textfile nor --json" in both.output
    slow = run(["metrics", str(root), "--serve", "9464", "--interval", "soon"])
    assert slow.exit_code == 2 and "--interval" in slow.output
    start = time.monotonic()
    taken, url = _serve(root)
    try:
        port = url.split(":")[2].split("/")[0]
        busy = run(["metrics", str(root), "--serve", f"127.0.0.1:{port}"])
        assert busy.exit_code == 1 and "cannot listen there" in busy.output
    finally:
        _stop(taken)
    assert time.monotonic() - start < 120
