"""``quiver status`` on an object root names as a partition's writer the process that
holds its writer LEASE (ARCHITECTURE.md §8.2), wherever it runs, and as its last write
that writer's: a consumer that seals a dead writer's committed rows (its planning runs
``finalize_idle_partitions``) rewrites the partition's HEARTBEAT, and status showed the
consumer's pid as the writer and no last write from then on.

Each "machine" is a process environment with its own ``XDG_CACHE_HOME`` (its own WAL
disk); everything runs as a real process against an S3 endpoint (moto), and what is
checked is what ``quiver status`` prints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.moto_server import MotoS3, moto_s3, unique_prefix

from .conftest import REPO

__all__ = ["moto_s3"]

PRELUDE = """
import json, os, sys
import pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=600), wal=WalConfig(flush_interval_s=0))
"""

WRITE = """
store = QuiverStore.open(url, cfg, partition="p-0", background=False, storage_options=opts)
txn = store.begin_txn("q", version)
store.append(pa.record_batch({"id": pa.array(range(5), pa.int64())}), txn_id=txn)
store.flush()
store.stage_txn(txn)
store.commit_txn("q", version, [("p-0", txn)], 5)
store.maintain()  # the heartbeat, as the maintenance thread writes it
print(json.dumps({"pid": os.getpid(), "last_write_ns": store.writer.last_write_ns}), flush=True)
if hold:
    sys.stdin.read()  # holds p-0 until the test closes stdin
    store.close()
else:
    os._exit(0)  # dies holding p-0: committed rows in its WAL and staged in the bucket
"""

CONSUME = """
from quiver_spark.subscription import Subscription
with QuiverStore.open(url, partition=None, create=False, storage_options=opts) as store:
    with Subscription(store, "fwd") as sub:
        sub.start("earliest")
        sub.seal_idle(force=True)  # what a source's planning does
print(json.dumps({"pid": os.getpid()}), flush=True)
"""


@dataclass
class Machine:
    home: Path
    url: str
    options: dict[str, object]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(self.home)}

    def code(self, body: str, **names: object) -> list[str]:
        assigns = "".join(f"{k} = {v!r}\n" for k, v in names.items())
        src = textwrap.dedent(PRELUDE) + f"url = {self.url!r}\nopts = {self.options!r}\n"
        return [sys.executable, "-c", src + assigns + textwrap.dedent(body)]

    def run(self, body: str, **names: object) -> dict[str, Any]:
        done = subprocess.run(
            self.code(body, **names), capture_output=True, text=True, timeout=120,
            env=self.env(), check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return out

    @contextmanager
    def holding_writer(self, version: int) -> Iterator[dict[str, Any]]:
        proc = subprocess.Popen(
            self.code(WRITE, version=version, hold=True), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=self.env(),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"the writer exited with {proc.wait(timeout=60)}"
            yield json.loads(line)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0

    def status(self, *args: str) -> subprocess.CompletedProcess[str]:
        flags = [f for k, v in self.options.items() for f in ("-S", f"{k}={v}")]
        done = subprocess.run(
            [sys.executable, "-m", "quiver_spark.cli", "status", self.url, *args, *flags],
            capture_output=True, text=True, timeout=120, env=self.env(), check=False,
            cwd=self.home,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def partition(self) -> dict[str, Any]:
        doc = json.loads(self.status("--json").stdout)
        (row,) = [p for p in doc["partitions"] if p["partition"] == "p-0"]
        return dict(row)

    def line(self) -> str:
        text = self.status().stdout
        return next(r for r in text.splitlines() if r.startswith("p-0 "))


def machines(s3: MotoS3, tmp: Path) -> tuple[Machine, Machine]:
    url = f"{s3.url}/{unique_prefix('holder')}"
    one, two = tmp / "one", tmp / "two"
    one.mkdir()
    two.mkdir()
    return Machine(one, url, dict(s3.options)), Machine(two, url, dict(s3.options))


def test_a_consumer_sealing_a_dead_writers_rows_is_not_shown_as_its_writer(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    here, _ = machines(moto_s3, tmp_path)
    wrote = here.run(WRITE, version=0, hold=False)
    before = here.partition()
    assert before["writer_live"] is False and before["segments"] == 0
    assert before["writer_pid"] == wrote["pid"]
    assert before["last_write_ns"] == wrote["last_write_ns"]

    consumer = here.run(CONSUME)
    after = here.partition()
    assert after["segments"] == 1 and after["rows"] == 5  # the consumer sealed them
    assert after["writer_live"] is False and after["stale"] is True
    assert after["writer_pid"] == wrote["pid"] != consumer["pid"]
    assert after["last_write_ns"] == wrote["last_write_ns"]
    line = here.line()
    assert " ago)" in line and "stale" in line, line  # LAST WRITE is the writer's


def test_the_writer_shown_is_the_lease_holder_wherever_it_runs(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    here, there = machines(moto_s3, tmp_path)
    dead = here.run(WRITE, version=0, hold=False)
    here.run(CONSUME)  # seals the dead writer's rows, leaving its heartbeat here
    with there.holding_writer(version=1) as live:
        # here: the heartbeat on this disk is the dead writer's; the lease says who writes
        seen = here.partition()
        assert seen["writer_live"] is True
        assert seen["writer_pid"] == live["pid"] != dead["pid"]
        assert seen["writer_host"] == socket.gethostname()
        assert seen["last_write_ns"] is None  # its heartbeat is on its own disk
        assert f"live (pid {live['pid']} on {socket.gethostname()})" in here.line()
        # there: its own heartbeat, its own last write
        own = there.partition()
        assert own["writer_live"] is True and own["writer_pid"] == live["pid"]
        assert own["last_write_ns"] == live["last_write_ns"]
        assert " ago)" in there.line()
