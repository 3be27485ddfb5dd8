"""``quiver subscribers PATH add NAME --create`` stopped at any point (Ctrl-C, or
kill -9) leaves PATH either no store at all, and the same command run again makes a
whole one, or a whole store: STORE, POLICY and POLICY.copy, which ``quiver fsck``
finds healthy. Never a store without its POLICY (which fsck would take for "a store
from before POLICY existed"): STORE, the object that makes a root a store, is
written last (ARCHITECTURE.md §7.1).

On an object root a real ``quiver`` process is stopped while each of its writes is in
flight (a fault proxy in front of moto holds that PUT): by Ctrl-C, after which the
held write never lands, and by kill -9, after which it lands late; together these are
every point between two writes. On a POSIX root every state a crash can leave during
creation (the process killed, or the power lost, after each file operation) is
checked the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quiver_spark import QuiverStore, RetentionConfig, StoreConfig, layout
from quiver_spark.objects import open_objects
from quiver_spark.policy import POLICY_COPY_FILE, POLICY_FILE, policy_before_store
from tests.fault_proxy import FaultProxy
from tests.faults import CrashSimulator, FaultyIO
from tests.moto_server import MotoS3, moto_s3, s3_options, unique_prefix

from .conftest import run

__all__ = ["moto_s3"]

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 5.0
"""How long after Ctrl-C the command may take to end (it ends in about half a second)."""
PRE_POLICY = "before POLICY existed"
WRITES = (
    POLICY_FILE,
    POLICY_COPY_FILE,
    layout.store_descriptor(),
    "subscribers/log/00000000000000000001.ack",
    "subscribers/records/s.sub",
)
"""Every object ``subscribers ROOT add s --create`` writes on a new object root."""


def flags(options: dict[str, object]) -> list[str]:
    return [a for k, v in options.items() for a in ("-S", f"{k}={v}")]


def add_create(url: str, options: dict[str, object]) -> list[str]:
    return ["subscribers", url, "add", "s", "--create", *flags(options)]


def quiver(args: list[str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "quiver_spark.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def assert_whole(path: str, options: list[str]) -> None:
    """fsck finds the store at ``path`` healthy, its POLICY recorded."""
    res = run(["fsck", path, *options])
    assert res.exit_code == 0, res.output + res.stderr
    assert PRE_POLICY not in res.output + res.stderr, res.output
    assert "healthy: 0 problem(s), 0 warning(s)" in res.output, res.output


def assert_no_store_then_made_by_a_rerun(path: str, options: list[str]) -> None:
    res = run(["status", path, *options])
    assert res.exit_code == 2 and "not a Quiver store" in res.stderr, res.output + res.stderr
    again = run(["subscribers", path, "add", "s", "--create", *options])
    assert again.exit_code == 0, again.output + again.stderr
    assert_whole(path, options)


def test_these_are_every_object_the_command_writes(moto_s3: MotoS3) -> None:
    with FaultProxy(moto_s3.endpoint) as proxy:
        url = f"{moto_s3.url}/{unique_prefix('create-writes')}"
        proc = quiver(add_create(url, s3_options(proxy.endpoint)))
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        prefix = f"/{url.removeprefix('s3://')}/"  # /<bucket>/<prefix>/
        written = [s.path.removeprefix(prefix) for s in proxy.requests("PUT")]
    assert sorted(written) == sorted(WRITES), proxy.describe()


@pytest.mark.parametrize("held", WRITES)
@pytest.mark.parametrize("stop", ["ctrl-c, the write never lands", "kill -9, the write lands late"])
def test_stopped_during_any_write_on_an_object_root(held: str, stop: str, moto_s3: MotoS3) -> None:
    url = f"{moto_s3.url}/{unique_prefix('create-stopped')}"
    proxy = FaultProxy(moto_s3.endpoint)
    try:
        rule = proxy.add_rule(method="PUT", path=f"/{held}$", action="hold")
        proc = quiver(add_create(url, s3_options(proxy.endpoint)))
        try:
            rule.wait_hit(60)
            if stop.startswith("ctrl-c"):
                proc.send_signal(signal.SIGINT)
                signalled = time.monotonic()
                try:
                    _out, err = proc.communicate(timeout=BOUND_S)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"still running {BOUND_S:g}s after Ctrl-C, its PUT {held} held")
                assert time.monotonic() - signalled < BOUND_S
                assert proc.returncode == 130, (proc.returncode, err)
                assert err.splitlines()[-1] == "Interrupted.", err
            else:
                proc.kill()
                proc.communicate(timeout=30)
                proxy.release()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        proxy.close()  # a write still held is dropped: it never lands
    options = flags(moto_s3.options)
    objects = open_objects(url, moto_s3.options)
    if objects.get(layout.store_descriptor()) is None:
        assert_no_store_then_made_by_a_rerun(url, options)
    else:
        assert objects.get(POLICY_FILE) is not None and objects.get(POLICY_COPY_FILE) is not None
        assert_whole(url, options)


def test_every_crash_during_creation_on_a_posix_root(tmp_path: Path) -> None:
    """What ``add --create`` makes before it registers NAME (the registry's own files
    are crash-safe on their own), crashed after each file operation."""
    root = tmp_path / "made"
    io = FaultyIO(record_data=True)
    QuiverStore.open(
        str(root), StoreConfig(), partition=None, create=True, background=False, io=io
    ).close()
    states = CrashSimulator(root, {}).states(io.trace)
    seen = {"no store": 0, "whole": 0}
    for i, state in enumerate(states):
        path = state.materialize(tmp_path / f"state-{i}")
        shown = f"crash at {state.point} ({state.kind}): {sorted(state.files)}"
        if layout.store_descriptor() in state.files:
            for name in (POLICY_FILE, POLICY_COPY_FILE):
                assert name in state.files, shown
            assert_whole(path, [])
            seen["whole"] += 1
        else:
            assert_no_store_then_made_by_a_rerun(path, [])
            seen["no store"] += 1
    assert seen["no store"] and seen["whole"], seen


def test_a_creation_naming_another_policy_than_an_unfinished_one_is_refused_before_its_store(
    tmp_path: Path,
) -> None:
    """A creation stopped after its POLICY recorded retention.max_age=1h: another one
    naming 2h is refused (the POLICY may be a creation's running now), saying what to
    do, and makes nothing; without the option it creates the store with 1h."""
    root = tmp_path / "s"
    left = StoreConfig(retention=RetentionConfig(max_age_hours=1.0))
    policy_before_store(open_objects(str(root)), left)
    res = run(["subscribers", root, "add", "s", "--create", "-o", "retention.max_age=2h"])
    assert res.exit_code == 2, res.output + res.stderr
    assert "has not finished (there is no STORE yet), retention.max_age=1h" in res.stderr
    change = f"then change it with: quiver config {root} set retention.max_age=VALUE"
    assert change in res.stderr, res.stderr
    assert not (root / layout.store_descriptor()).exists()
    res = run(["subscribers", root, "add", "s", "--create"])
    assert res.exit_code == 0, res.output + res.stderr
    shown = run(["config", root, "show", "--json"])
    assert '"retention.max_age": "1h"' in shown.output, shown.output
    assert_whole(str(root), [])
