"""A lease whose holder is a dead process of this same host is taken over at once.

While the holding process lives, a new process is refused naming it; once it is killed
(SIGKILL: no release, no cleanup) the next acquirer takes the lease at once with the
next epoch, without waiting out the ttl. A pid that now belongs to another process (a
different start time) counts as dead too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quiver_spark.control import lease as lease_mod
from quiver_spark.control.lease import HolderInfo, Lease
from quiver_spark.errors import LeaseHeldError
from quiver_spark.objects.local import LocalObjects

KEY = "partitions/h-0/LEASE"

HOLDER = """
import sys, time
from quiver_spark.control.lease import Lease
from quiver_spark.objects.local import LocalObjects
lease = Lease.acquire(LocalObjects(root), key, purpose="writer", ttl_s=3600)
print(lease.epoch, flush=True)
time.sleep(600)
"""


def test_a_killed_holder_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    objects = LocalObjects(str(tmp_path))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"root = {str(tmp_path)!r}\nkey = {KEY!r}\n" + textwrap.dedent(HOLDER),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "1"
        with pytest.raises(LeaseHeldError) as err:
            Lease.acquire(objects, KEY, purpose="writer")
        assert f"pid {child.pid} on " in str(err.value)
        assert "expires 3600 seconds after its last renewal" in str(err.value)
        # a running holder of this host is alive: an acquirer that would wait for a
        # holder that stopped renewing gives up at once
        waited: list[float] = []
        with pytest.raises(LeaseHeldError):
            Lease.acquire(
                objects, KEY, purpose="writer", wait_s=3600, stop_when_renewed=True,
                sleep=waited.append,
            )  # fmt: skip
        assert waited == []
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    got = Lease.acquire(objects, KEY, purpose="writer")  # no waiting: ttl is an hour
    assert got.epoch == 2
    got.release()


def test_a_holder_pid_now_used_by_another_process_is_taken_over_at_once(tmp_path: Path) -> None:
    objects = LocalObjects(str(tmp_path))
    me = lease_mod._me()
    if me.node is None or me.pid_start is None:
        pytest.fail("this test needs /proc (Linux)")
    parent = os.getppid()  # alive, but not the process that wrote the lease
    holder = HolderInfo(me.host, parent, "b" * 32, "writer", "?", 3600.0, 1, me.node)
    objects.create(KEY, lease_mod._encode(4, holder, seq=0))
    got = Lease.acquire(objects, KEY, purpose="writer")
    assert got.epoch == 5
