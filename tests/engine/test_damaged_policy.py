"""A damaged or missing POLICY never stops the store.

While ``<root>/POLICY`` cannot be read, writers, consumers and retention go on under
the most conservative reading of a policy (no time window, no drop_oldest, no size
cap, no expiry; segments every subscriber acknowledged are still reclaimed), the
policy they use names the damaged file, and an acknowledgement never raises after
the position was written. Every change of the policy also writes its copy
(``POLICY.copy``), from which :func:`repair_policy` restores it; a ``set`` on a
damaged policy is refused and names the repair.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import QuiverStore
from quiver_spark.config import SizeCapPolicy
from quiver_spark.errors import CorruptionError, QuiverError
from quiver_spark.fs import DEFAULT_IO
from quiver_spark.objects.local import LocalObjects
from quiver_spark.options import store_config_from_options
from quiver_spark.policy import (
    POLICY_COPY_FILE,
    POLICY_FILE,
    read_policy,
    repair_policy,
)
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.child import run_python
from tests.damage import flip_byte

STRICT = {
    "retention.max_age": 1.0,
    "retention.size_cap": 1024,
    "retention.size_cap_policy": SizeCapPolicy.DROP_OLDEST,
    "subscriber.expire_after": 60.0,
}
"""A policy that would age out, drop and expire everything a day later."""
DAY_NS = 86_400 * 10**9


def fill(root: Path, n: int, **options: str) -> None:
    """``n`` finalized segments of p-0, the store created with ``options``."""
    cfg = store_config_from_options(options)
    with QuiverStore.open(str(root), cfg, partition="p-0", background=False) as s:
        for i in range(n):
            s.append(pa.record_batch({"k": pa.array([i] * 100, pa.int64())}))
            s.finalize()


def make_strict(root: Path) -> None:
    with opened(root) as s:
        s.set_policy(STRICT)


def damage(root: Path) -> Path:
    path = root / POLICY_FILE
    flip_byte(path, 20)  # inside the msgpack body: the frame's CRC fails
    return path


def opened(root: Path, **options: str) -> QuiverStore:
    cfg = store_config_from_options(options)
    return QuiverStore.open(str(root), cfg, partition=None, create=False, background=False)


def test_a_damaged_policy_reads_as_the_most_conservative_policy_naming_the_file(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    path = damage(tmp_path)
    policy = read_policy(LocalObjects(str(tmp_path)))
    assert policy is not None and policy.damaged is not None
    assert str(path) in policy.damaged and "crc mismatch" in policy.damaged
    with opened(tmp_path) as s:
        r = s.config.retention
        assert r.max_age_hours is None and r.size_cap_bytes is None
        assert r.size_cap_policy is SizeCapPolicy.BACKPRESSURE
        assert s.config.subscriber_expire_after_s is None
        assert s.policy.damaged == policy.damaged


def test_retention_under_a_damaged_policy_reclaims_only_what_everyone_acknowledged(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 4)
    with SubscriberRegistry.open(str(tmp_path)) as reg:
        reg.register("done", retained={"p-0": [1, 2, 3, 4]})
        reg.register("idle", retained={"p-0": [1, 2, 3, 4]})
        for name in ("done", "idle"):
            reg.record(name, "p-0", [1], Outcome.ACK)
        reg.record("done", "p-0", [2, 3, 4], Outcome.ACK)
    make_strict(tmp_path)
    damage(tmp_path)
    with opened(tmp_path) as s:
        # a day later: the recorded max_age, size cap and expiry would all have acted
        result = s.run_retention(time.time_ns() + DAY_NS)
        assert result.deleted == {"p-0": [1]}
        assert result.dropped == {} and result.expired == []
        assert [m.seq for m in s.segments()] == [2, 3, 4]
    with SubscriberRegistry.open(str(tmp_path)) as reg:
        assert sorted(reg.subscribers()) == ["done", "idle"]


def test_an_explicit_option_is_not_refused_while_the_policy_is_damaged(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    damage(tmp_path)
    with opened(tmp_path, **{"retention.max_age": "7d"}) as s:
        assert s.config.retention.max_age_hours is None


def test_a_writer_in_a_new_process_appends_and_finalizes_under_a_damaged_policy(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    damage(tmp_path)
    run_python(
        """
        import pyarrow as pa
        from quiver_spark import QuiverStore
        from quiver_spark.options import store_config_from_options
        cfg = store_config_from_options({"retention.max_age": "1h"})
        with QuiverStore.open(root, cfg, partition="p-1", background=False) as s:
            s.append(pa.record_batch({"k": pa.array([7], pa.int64())}))
            assert s.finalize() is not None
            s.run_retention()
        """,
        root=str(tmp_path),
    )
    with opened(tmp_path) as s:
        assert sorted(m.partition for m in s.segments()) == ["p-0", "p-1"]


def test_a_consumers_ack_under_a_damaged_policy_returns_and_moves_its_position(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 3)
    make_strict(tmp_path)
    with Subscription.open(str(tmp_path), "c") as sub:
        batch = sub.poll()
        assert batch is not None
        damage(tmp_path)  # while the consumer is open
        assert sub.ack(batch.end) == 3
    with Subscription.open(str(tmp_path), "c") as sub:
        assert sub.acked() == Position({"p-0": 3})


def test_a_missing_policy_whose_copy_exists_is_damage_and_not_recorded_again(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    os.remove(tmp_path / POLICY_FILE)
    cfg = store_config_from_options({"retention.max_age": "2h"})
    with QuiverStore.open(str(tmp_path), cfg, partition="p-0", background=False) as s:
        assert s.policy.damaged is not None and "missing" in s.policy.damaged
        assert s.config.retention.max_age_hours is None
    assert not (tmp_path / POLICY_FILE).exists()  # not recorded from an opener's options


def test_every_change_of_the_policy_writes_its_copy(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    assert (tmp_path / POLICY_COPY_FILE).read_bytes() == (tmp_path / POLICY_FILE).read_bytes()
    with opened(tmp_path) as s:
        s.set_policy({"retention.max_age": 3.0})
    assert (tmp_path / POLICY_COPY_FILE).read_bytes() == (tmp_path / POLICY_FILE).read_bytes()


def test_a_change_of_a_damaged_policy_is_refused_naming_the_repair(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    path = damage(tmp_path)
    before = path.read_bytes()
    with opened(tmp_path) as s, pytest.raises(CorruptionError) as err:
        s.set_policy({"retention.max_age": 3.0})
    msg = str(err.value)
    assert str(path) in msg and f"quiver config {tmp_path} repair" in msg
    assert path.read_bytes() == before


def test_repair_from_the_last_good_copy_restores_the_policy_as_a_new_generation(
    tmp_path: Path,
) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    with opened(tmp_path) as s:
        s.set_policy({"retention.max_age": 3.0})  # generation 3
    damage(tmp_path)
    new, repaired = repair_policy(LocalObjects(str(tmp_path)), {}, from_last_good=True)
    assert repaired == str(tmp_path / POLICY_FILE)
    assert new.generation == 4 and new.damaged is None
    assert new.max_age_hours == 3.0 and new.expire_after_s == 60.0
    again = read_policy(LocalObjects(str(tmp_path)))
    assert again == new
    assert (tmp_path / POLICY_COPY_FILE).read_bytes() == (tmp_path / POLICY_FILE).read_bytes()


def test_repair_from_explicit_values_starts_from_the_defaults(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    damage(tmp_path)
    flip_byte(tmp_path / POLICY_COPY_FILE, 20)  # the copy too: only explicit values remain
    with pytest.raises(CorruptionError, match=r"POLICY\.copy"):
        repair_policy(LocalObjects(str(tmp_path)), {}, from_last_good=True)
    new, _ = repair_policy(LocalObjects(str(tmp_path)), {"retention.max_age": 5.0})
    assert new.max_age_hours == 5.0
    assert new.size_cap_bytes is None and new.expire_after_s is None
    assert read_policy(LocalObjects(str(tmp_path))) == new


def test_repair_of_a_readable_policy_is_refused_naming_set(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    with pytest.raises(QuiverError, match=r"reads fine \(generation 2\).*set KEY=VALUE"):
        repair_policy(LocalObjects(str(tmp_path)), {"retention.max_age": 5.0})


def test_repair_of_a_readable_policy_rewrites_a_damaged_or_missing_copy(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    make_strict(tmp_path)
    copy = tmp_path / POLICY_COPY_FILE
    for spoil in (lambda: flip_byte(copy, 20), copy.unlink):
        spoil()
        policy, repaired = repair_policy(LocalObjects(str(tmp_path)), {})
        assert (policy.generation, repaired) == (2, str(copy))
        assert copy.read_bytes() == (tmp_path / POLICY_FILE).read_bytes()
    with pytest.raises(QuiverError, match="and so does its copy: nothing to repair"):
        repair_policy(LocalObjects(str(tmp_path)), {})


def test_an_error_reading_the_policy_never_fails_an_acknowledgement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(tmp_path, 2)
    make_strict(tmp_path)
    real = DEFAULT_IO.before

    def failing(op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        if op == "read" and os.path.basename(path) == POLICY_FILE:
            raise OSError(errno.EIO, "Input/output error", path)
        real(op, path, data, size)

    with Subscription.open(str(tmp_path), "c") as sub:
        batch = sub.poll()
        assert batch is not None
        monkeypatch.setattr(DEFAULT_IO, "before", failing)
        assert sub.ack(batch.end) == 2
        assert sub.store.policy.damaged is not None
        assert "Input/output error" in sub.store.policy.damaged
        monkeypatch.undo()  # readable again: the next read applies it
        assert sub.store.policy.damaged is None
        assert sub.store.policy.max_age_hours == 1.0
