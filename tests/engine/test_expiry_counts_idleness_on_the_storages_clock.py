"""Subscriber expiry never compares clocks of different machines (ARCHITECTURE.md §13.8).

``subscriber.expire_after`` deregisters a subscriber neither live nor acknowledging
for that long. Idleness is measured on the storage's clock (a record's modification
time as the storage stamped it, against a probe the pass writes), never from the wall
times that consumers on other machines wrote into its record: so a ``quiver gc`` whose
clock is hours ahead never expires a subscriber that was live or acknowledged seconds
earlier, a consumer whose clock is hours behind is not taken for idle, and a
subscriber truly idle for ``expire_after`` is expired on time by a pass whose clock is
hours behind. On a POSIX root (the file system's mtimes), on ``memory://`` (the
in-process store's own clock) and on S3 (moto's Last-Modified).

The skewed processes are real ones (``quiver gc``, a consumer) whose ``time.time_ns`` and
``time.time`` are moved by hours; on ``memory://``, whose bucket lives in this process,
they are moved here for the pass (or the acknowledgement) only.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore, StoreConfig
from quiver_spark.objects.clock import StorageClock
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.subscribers import records
from quiver_spark.subscription import Subscription
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.storage_time import HOUR_S, time_passes
from tests.stores import HAND_SEALED, wal_in

__all__ = ["moto_s3"]

SKEWS_S = [2 * HOUR_S, -2 * HOUR_S]
"""How far the skewed process's wall clock is from the storage's: ahead, behind."""

SKEWED = """
import time
_ns, _s = time.time_ns, time.time
time.time_ns = lambda: _ns() + int(skew_s * 10**9)
time.time = lambda: _s() + skew_s
"""
"""Run first in a child process: its wall clock is ``skew_s`` off, nothing else is."""

GC = (
    SKEWED
    + """
from quiver_spark.cli import cli
flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
cli(["gc", root, *flags])
"""
)

CONSUMER = (
    SKEWED
    + """
from quiver_spark.subscription import Subscription
with Subscription.open(root, name) as sub:
    assert sub.ack(sub.next_batch_end(sub.start())) >= 1
"""
)


def _child(code: str, tmp_path: Path, **names: object) -> None:
    """``code`` in a new interpreter (its WAL cache under ``tmp_path``); must succeed."""
    assigns = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=os.getcwd())
    out = subprocess.run(
        [sys.executable, "-c", assigns + textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


@contextmanager
def wall_clock_off_by(skew_s: float) -> Iterator[None]:
    """This process's wall clock ``skew_s`` off while inside (the in-process store's
    clock, like any storage's, is not this process's wall clock)."""
    ns, s = time.time_ns, time.time
    time.time_ns = lambda: ns() + int(skew_s * 10**9)
    time.time = lambda: s() + skew_s
    try:
        yield
    finally:
        time.time_ns, time.time = ns, s


@dataclasses.dataclass
class Root:
    """A store whose policy expires subscribers after ``expire_after_s``."""

    url: str
    wal: Path
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def config(self) -> StoreConfig:
        if self.url.startswith(("memory://", "s3://")):
            return wal_in(self.wal)
        return HAND_SEALED

    def handle(self) -> QuiverStore:
        return QuiverStore.open(
            self.url, self.config(), partition=None, create=False, background=False,
            storage_options=self.options or None,
        )  # fmt: skip

    def consumer(self, name: str) -> Subscription:
        return Subscription(self.handle(), name, owns_store=True)

    def registered(self) -> list[str]:
        with self.handle() as s:
            return s.subscribers.subscribers()

    def acknowledge_all(self, name: str) -> None:
        """``name`` reads and acknowledges everything, then stops."""
        with self.consumer(name) as sub:
            assert sub.ack(sub.next_batch_end(sub.start())) >= 1


def make(url: str, tmp_path: Path, expire_after_s: float, **options: Any) -> Root:
    """Two segments in ``url``; the store's policy expires after ``expire_after_s``."""
    root = Root(url, tmp_path / "wal", dict(options))
    config = dataclasses.replace(root.config(), subscriber_expire_after_s=expire_after_s)
    with QuiverStore.open(
        url, config, partition="p-0", background=False, storage_options=options or None
    ) as w:
        for i in range(2):
            w.append(pa.record_batch({"k": pa.array([i], pa.int64())}))
            w.finalize()
    return root


@pytest.fixture(params=["posix", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    """A root whose records' times a test can move: a POSIX directory or memory://."""
    if request.param == "memory":
        request.getfixturevalue("fresh_memory")
        return make("memory://clock/s", tmp_path, HOUR_S)
    return make(str(tmp_path / "s"), tmp_path, HOUR_S)


def skewed_pass(root: Root, skew_s: float, tmp_path: Path) -> None:
    """One retention pass whose wall clock is ``skew_s`` off: ``quiver gc`` in a
    process of its own, or on memory:// (this process's bucket) a pass here."""
    if root.url.startswith("memory://"):
        with wall_clock_off_by(skew_s), root.handle() as s:
            s.run_retention(now_ns=time.time_ns())  # the clock a pass is handed
        return
    _child(GC, tmp_path, root=root.url, options=root.options, skew_s=skew_s)


@pytest.mark.parametrize("skew_s", SKEWS_S)
def test_a_pass_with_a_skewed_clock_never_expires_a_live_or_recently_acknowledging_subscriber(
    root: Root, skew_s: float, tmp_path: Path
) -> None:
    root.acknowledge_all("recent")  # seconds ago
    with root.consumer("live") as live:
        live.start()
        skewed_pass(root, skew_s, tmp_path)
        assert root.registered() == ["live", "recent"]
    time_passes(root.url, HOUR_S - 60)  # both idle for 59 minutes by the storage's clock
    skewed_pass(root, skew_s, tmp_path)
    assert root.registered() == ["live", "recent"]


@pytest.mark.parametrize("skew_s", SKEWS_S)
def test_a_truly_idle_subscriber_is_expired_on_time_by_a_pass_with_a_skewed_clock(
    root: Root, skew_s: float, tmp_path: Path
) -> None:
    root.acknowledge_all("idle")
    time_passes(root.url, HOUR_S + 60)  # idle an hour and a minute by the storage's clock
    skewed_pass(root, skew_s, tmp_path)
    assert root.registered() == []
    with root.handle() as s:
        rec = records.read_record(s.objects, "idle")
    assert rec is not None and rec.expired_ns is not None


@pytest.mark.parametrize("skew_s", SKEWS_S)
def test_a_consumer_whose_clock_is_off_is_never_taken_for_idle(
    root: Root, skew_s: float, tmp_path: Path
) -> None:
    # a consumer on a machine whose clock is off registers and acknowledges just now
    if root.url.startswith("memory://"):
        with wall_clock_off_by(skew_s):
            root.acknowledge_all("c")
    else:
        _child(CONSUMER, tmp_path, root=root.url, name="c", skew_s=skew_s)
    with root.handle() as s:  # its record shows its clock; expiry does not go by it
        rec = records.read_record(s.objects, "c")
        assert rec is not None and rec.last_ack_ns is not None
        assert abs(rec.last_ack_ns - time.time_ns() - skew_s * 1e9) < 600 * 1e9
        assert s.run_retention().expired == []
    time_passes(root.url, HOUR_S - 60)
    with root.handle() as s:
        assert s.run_retention().expired == []
    time_passes(root.url, 120)  # idle an hour and a minute by the storage's clock
    with root.handle() as s:
        assert s.run_retention().expired == ["c"]


def test_on_s3_a_skewed_quiver_gc_expires_only_what_the_storages_clock_says_is_idle(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('expiry-clock')}"
    root = make(url, tmp_path, HOUR_S, **moto_s3.options)
    root.acknowledge_all("recent")
    with root.consumer("live") as live:
        live.start()
        for skew_s in SKEWS_S:
            _child(GC, tmp_path, root=url, options=moto_s3.options, skew_s=skew_s)
            assert root.registered() == ["live", "recent"]


def test_on_s3_a_truly_idle_subscriber_is_expired_by_a_gc_whose_clock_is_behind(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('expiry-clock')}"
    after_s = 1.0
    root = make(url, tmp_path, after_s, **moto_s3.options)
    root.acknowledge_all("idle")
    with root.handle() as s:
        rec = records.read_record(s.objects, "idle")
    assert rec is not None and rec.stored_ns is not None
    # S3's clock says whole seconds; idle past after_s and the comparison's allowance
    deadline = rec.stored_ns + int((after_s + 4) * 1e9)
    while (probe := _s3_now(root)) < deadline:
        time.sleep(min(1.0, (deadline - probe) / 1e9))
    _child(GC, tmp_path, root=url, options=moto_s3.options, skew_s=-2 * HOUR_S)
    assert root.registered() == []


def _s3_now(root: Root) -> int:
    """The storage's clock now (the modification time of its probe, written now)."""
    with root.handle() as s:
        return StorageClock(s.objects, records.CLOCK_KEY).probe()


@pytest.mark.parametrize("skew_s", SKEWS_S)
def test_a_tombstone_left_on_an_active_subscriber_is_taken_back_only_once_settled(
    root: Root, skew_s: float, tmp_path: Path
) -> None:
    root.acknowledge_all("c")
    with root.handle() as s:  # a pass wrote its tombstone, then died before its DEREG
        now = StorageClock(s.objects, records.CLOCK_KEY).probe()
        records.update_record(
            s.objects,
            "c",
            lambda rec: None if rec is None else rec.quietly(
                expired_ns=time.time_ns(), expired_after_s=HOUR_S, expired_stored_ns=now
            ),
        )  # fmt: skip
    skewed_pass(root, skew_s, tmp_path)  # a pass at work may still be between the two
    with root.handle() as s:
        rec = records.read_record(s.objects, "c")
        assert rec is not None and rec.expired_ns is not None
    time_passes(root.url, 601)  # older than any pass takes between the two
    skewed_pass(root, skew_s, tmp_path)
    with root.handle() as s:
        rec = records.read_record(s.objects, "c")
        assert rec is not None and rec.expired_ns is None and rec.expired_stored_ns is None
    assert root.registered() == ["c"]


def test_a_pass_that_cannot_read_the_storages_clock_expires_nothing(
    fresh_memory: None, tmp_path: Path
) -> None:
    root = make("memory://clock/s", tmp_path, HOUR_S)
    root.acknowledge_all("idle")
    time_passes(root.url, 2 * HOUR_S)
    with root.handle() as s:
        objects = s.objects
        assert isinstance(objects, MemoryObjects)

        def no_probe(op: str, key: str) -> None:
            if key == records.CLOCK_KEY:
                raise OSError("the probe could not be written")

        objects.faults.before = no_probe
        assert s.run_retention().expired == []
        objects.faults.before = None
        assert s.run_retention().expired == ["idle"]
