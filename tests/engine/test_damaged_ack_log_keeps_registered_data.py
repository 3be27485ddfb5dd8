"""One damaged byte of the shared ack log never gets a registered subscriber's data deleted.

A subscriber's record (``subscribers/records/<name>.sub``) is a second witness of its
registration: while the record exists (not expired) and the ack log lost the
registration, every segment not recorded deleted is kept, by ``quiver gc`` and by a
writer's retention pass alike, until an operator runs ``quiver subscribers PATH add
NAME`` (registers it again) or ``remove NAME`` (releases it); ``quiver status`` and
``quiver fsck`` name the situation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscribers import Outcome
from quiver_spark.subscribers import log as acklog
from quiver_spark.subscription import Subscription
from tests.stores import int_segments

CFG = StoreConfig(segment=SegmentConfig(max_open_duration_s=3600))


def _quiver(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def _seqs(root: Path) -> list[int]:
    with QuiverStore.open(str(root), CFG, partition=None, background=False) as s:
        return [m.seq for m in s.segments()]


def _flip_a_byte_of_the_last_registration(root: Path) -> None:
    """The last ack-log record is ``late``'s registration: damage one byte of its name."""
    d = root / "subscribers"
    last = sorted(n for n in os.listdir(d) if n.startswith("ack-"))[-1]
    path = d / last
    raw = bytearray(path.read_bytes())
    assert raw[-32] == acklog.K_NAME
    raw[-20] ^= 0xFF
    path.write_bytes(bytes(raw))


def _store_where_late_lost_its_registration(root: Path) -> None:
    int_segments(root, [(i * 10, 10) for i in range(4)], config=CFG)
    with Subscription.open(str(root), "early") as early:
        early.start()
        # done with everything (recorded without a retention pass, which would delete it)
        early.registry.record("early", "p-0", [1, 2, 3, 4], Outcome.ACK)
    with Subscription.open(str(root), "late") as late:
        late.start()  # registered, has not read anything yet
    _flip_a_byte_of_the_last_registration(root)
    with QuiverStore.open(str(root), CFG, partition=None, background=False) as s:
        assert s.subscribers.subscribers() == ["early"]  # the ack log lost "late"


def test_quiver_gc_keeps_what_a_subscriber_known_only_by_its_record_has_not_acknowledged(
    tmp_path: Path,
) -> None:
    _store_where_late_lost_its_registration(tmp_path)
    out = _quiver("gc", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert _seqs(tmp_path) == [1, 2, 3, 4]


def test_a_writers_retention_pass_keeps_it_too(tmp_path: Path) -> None:
    _store_where_late_lost_its_registration(tmp_path)
    with QuiverStore.open(str(tmp_path), CFG, partition="p-0", background=False) as w:
        w.append(pa.record_batch({"k": pa.array([99], pa.int64())}))
        w.finalize()
        result = w.run_retention()
        assert result.deleted == {}
        assert result.unregistered == ["late"]
    assert _seqs(tmp_path) == [1, 2, 3, 4, 5]


def test_status_and_fsck_name_the_situation_and_the_commands_that_resolve_it(
    tmp_path: Path,
) -> None:
    _store_where_late_lost_its_registration(tmp_path)
    status = _quiver("status", str(tmp_path))
    assert "late" in status.stdout and "not registered in the ack log" in status.stdout
    assert f"quiver subscribers {tmp_path} add late" in status.stdout
    doc = json.loads(_quiver("status", str(tmp_path), "--json").stdout)
    assert doc["unregistered_records"] == ["late"]
    fsck = _quiver("fsck", str(tmp_path))
    assert "late" in fsck.stdout and "not registered in the ack log" in fsck.stdout


def test_adding_it_again_resumes_and_removing_it_releases_the_data(tmp_path: Path) -> None:
    _store_where_late_lost_its_registration(tmp_path)
    added = _quiver("subscribers", str(tmp_path), "add", "late")
    assert added.returncode == 0, added.stderr
    assert _quiver("gc", str(tmp_path)).returncode == 0
    assert _seqs(tmp_path) == [1, 2, 3, 4]  # registered again from the retained data
    removed = _quiver("subscribers", str(tmp_path), "remove", "late")
    assert removed.returncode == 0, removed.stderr
    assert _quiver("gc", str(tmp_path)).returncode == 0
    assert _seqs(tmp_path) == []


def test_removing_one_whose_registration_is_lost_releases_its_data(tmp_path: Path) -> None:
    _store_where_late_lost_its_registration(tmp_path)
    removed = _quiver("subscribers", str(tmp_path), "remove", "late")
    assert removed.returncode == 0, removed.stderr
    assert _quiver("gc", str(tmp_path)).returncode == 0
    assert _seqs(tmp_path) == []
